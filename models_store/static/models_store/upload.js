// Upload page: drag and drop, size check, XHR upload with a real progress bar.
"use strict";

const form = document.getElementById("upload-form");
if (form) {
  const input = document.getElementById("id_file");
  const zone = document.getElementById("dropzone");
  const info = document.getElementById("file-info");
  const box = document.getElementById("upload-progress");
  const bar = document.getElementById("progress-bar");
  const text = document.getElementById("progress-text");
  const errorBox = document.getElementById("upload-error");
  const submit = document.getElementById("upload-submit");
  const maxBytes = Number(form.dataset.maxBytes);
  const mb = (n) => (n / 1048576).toFixed(n < 10485760 ? 2 : 1) + " MB";

  const showError = (message) => { errorBox.textContent = message; errorBox.hidden = !message; };
  const data = document.getElementById("id_data");
  const total = () => Array.from(data.files).reduce((sum, f) => sum + f.size, input.files[0] ? input.files[0].size : 0);
  const tooLarge = () => `The files are larger than the upload limit of ${maxBytes} bytes.`;
  const describe = () => {
    const file = input.files[0];
    if (!file) return;
    const extra = data.files.length ? ` + ${data.files.length} data file(s) · ${mb(total())} in all` : "";
    info.textContent = `${file.name} · ${mb(file.size)}${extra}`;
    showError(total() > maxBytes ? tooLarge() : "");
  };

  input.addEventListener("change", describe);
  data.addEventListener("change", describe);
  ["dragenter", "dragover"].forEach((type) => zone.addEventListener(type, (event) => {
    event.preventDefault();
    zone.classList.add("over");
  }));
  ["dragleave", "drop"].forEach((type) => zone.addEventListener(type, () => zone.classList.remove("over")));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    if (event.dataTransfer.files.length) {
      input.files = event.dataTransfer.files;
      describe();
    }
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const file = input.files[0];
    const config = form.querySelector("[name=config]");
    const ensemble = config && /platform\s*:\s*"ensemble"/.test(config.value);  // an ensemble: its config alone
    if (!file && !ensemble) { showError("Choose a model file (or, for an ensemble, give its config.pbtxt alone)."); return; }
    if (total() > maxBytes) { showError(tooLarge()); return; }
    showError("");
    submit.disabled = true;
    box.hidden = false;
    bar.value = 0;
    const xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.setRequestHeader("X-Requested-With", "XMLHttpRequest");
    xhr.setRequestHeader("X-CSRFToken", form.querySelector("[name=csrfmiddlewaretoken]").value);
    xhr.upload.addEventListener("progress", (e) => {
      if (!e.lengthComputable) return;
      bar.value = Math.floor((e.loaded / e.total) * 100);
      text.textContent = `${mb(e.loaded)} of ${mb(e.total)} sent`;
    });
    xhr.upload.addEventListener("load", () => {
      bar.value = 100;
      text.textContent = "Uploaded; checking and validating the model…";
    });
    xhr.addEventListener("load", () => {
      let answer = {};
      try { answer = JSON.parse(xhr.responseText); } catch (e) { /* not JSON */ }
      if (xhr.status >= 200 && xhr.status < 300 && answer.redirect) {
        text.textContent = "Done.";
        window.location.assign(answer.redirect);
        return;
      }
      submit.disabled = false;
      box.hidden = true;
      showError(answer.error || `The upload failed (HTTP ${xhr.status}).`);
    });
    xhr.addEventListener("error", () => {
      submit.disabled = false;
      showError("The connection failed during the upload; nothing was stored. Try again.");
    });
    xhr.send(new FormData(form));
  });
}
