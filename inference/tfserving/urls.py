"""TF Serving v1 REST: every /v1/ path goes to one view, which applies TF
Serving's own path grammar (malformed paths answer 400, as TF Serving does)."""

from django.urls import re_path

from inference.tfserving.views import TFServingView

urlpatterns = [re_path(r"^v1(?P<path>/.*)?$", TFServingView.as_view(), name="tfserving")]
