"""Settings, read from the environment (django-environ) with safe defaults for
the embedded mode: SQLite and the model store under ``var/``, ONNX Runtime in
process. One module per concern; ``docs/configuration.md`` lists every
variable, a section per module (``tests/test_configuration_docs.py`` keeps
the two in step):

- :mod:`.base`: the project (VAR_DIR, secret key, apps, database, static files, logging);
- :mod:`.web`: the web UI and the management API (sign-in, cookies, uploads, the API schema);
- :mod:`.sso`: single sign-on with OpenID Connect (the identity provider, groups to teams and roles);
- :mod:`.store`: the model store (artifacts, S3, validation, upkeep, webhooks);
- :mod:`.servers`: the HTTP and gRPC servers (processes, threads, request bodies);
- :mod:`.inference`: ONNX Runtime, the registry's polling, caches, memory, tokens, rate limits;
- :mod:`.broker`: Redis and Celery;
- :mod:`.workers`: worker mode;
- :mod:`.observability`: traces, payload logging, the request log, statistics, charts.
"""

from hosting.settings.base import *  # noqa: F403
from hosting.settings.broker import *  # noqa: F403
from hosting.settings.inference import *  # noqa: F403
from hosting.settings.observability import *  # noqa: F403
from hosting.settings.servers import *  # noqa: F403
from hosting.settings.sso import *  # noqa: F403
from hosting.settings.store import *  # noqa: F403
from hosting.settings.web import *  # noqa: F403
from hosting.settings.workers import *  # noqa: F403
