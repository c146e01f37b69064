// modelhost: small enhancements of plain pages (no framework).
"use strict";

// Snippet tabs.
document.querySelectorAll("[data-tabs]").forEach((box) => {
  box.querySelectorAll("[data-tab]").forEach((tab) => {
    tab.addEventListener("click", () => {
      box.querySelectorAll("[data-tab]").forEach((t) => t.setAttribute("aria-selected", String(t === tab)));
      box.querySelectorAll("[data-panel]").forEach((p) => { p.hidden = p.dataset.panel !== tab.dataset.tab; });
    });
  });
});

// Copy buttons: copy the <pre> next to the button.
function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
  const area = document.createElement("textarea");
  area.value = text;
  document.body.appendChild(area);
  area.select();
  document.execCommand("copy");
  area.remove();
  return Promise.resolve();
}
document.querySelectorAll("[data-copy]").forEach((button) => {
  button.addEventListener("click", () => {
    const pre = button.parentElement.querySelector("pre");
    copyText(pre.textContent).then(() => {
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    });
  });
});

// Confirm destructive forms.
document.querySelectorAll("form[data-confirm]").forEach((form) => {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
});

// Forms that answer in place (Redeliver): POST with Accept: application/json, show the answer's
// message next to the button; without JavaScript they post and redirect with the message.
document.querySelectorAll("form[data-async]").forEach((form) => {
  const status = form.querySelector("[role=status]");
  const button = form.querySelector("button[type=submit]");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    status.textContent = "sending…";
    try {
      const response = await fetch(form.action, {
        method: "POST", body: new FormData(form), credentials: "same-origin", headers: { Accept: "application/json" },
      });
      const answer = await response.json().catch(() => ({}));
      status.textContent = response.ok ? answer.message : `refused (${response.status}): ${answer.error || response.statusText}`;
    } catch (error) {
      status.textContent = `not sent: ${error}`;
    } finally {
      button.disabled = false;
    }
  });
});

// A version being validated: poll its state, reload when it changes.
const stateBox = document.querySelector("#version-state[data-poll]");
if (stateBox) {
  const initial = stateBox.querySelector("[data-state]").dataset.state;
  const timer = setInterval(async () => {
    try {
      const response = await fetch(stateBox.dataset.poll, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const version = await response.json();
      if (version.state !== initial) { clearInterval(timer); window.location.reload(); }
    } catch (error) { /* try again on the next tick */ }
  }, 1000);
}

// "Try it": send the request to the public V2 REST API and show both sides.
const tryit = document.getElementById("tryit");
if (tryit) {
  // Indented JSON with arrays of numbers or strings kept on one line.
  const pretty = (text) => {
    let doc;
    try { doc = JSON.parse(text); } catch (e) { return text; }
    return JSON.stringify(doc, null, 2).replace(/\[[^\[\]{}]*\]/g, (list) => list.replace(/\s*\n\s*/g, " ").replace("[ ", "[").replace(" ]", "]"));
  };
  document.getElementById("tryit-send").addEventListener("click", async () => {
    const body = document.getElementById("tryit-body").value;
    const headers = { "Content-Type": "application/json" };
    const tokenField = document.getElementById("tryit-token");
    if (tokenField && tokenField.value.trim()) headers.Authorization = "Bearer " + tokenField.value.trim();
    const shown = Object.entries(headers).map(([k, v]) => `${k}: ${k === "Authorization" ? "Bearer …" : v}`).join("\n");
    document.getElementById("tryit-result").hidden = false;  // shown once there is something to show
    document.getElementById("tryit-request").textContent = `POST ${tryit.dataset.url}\n${shown}\n\n${pretty(body)}`;
    const status = document.getElementById("tryit-status");
    const answer = document.getElementById("tryit-response");
    status.textContent = "sending…";
    answer.textContent = "";
    answer.removeAttribute("data-status");
    const started = performance.now();
    try {
      const response = await fetch(tryit.dataset.url, { method: "POST", headers, body, credentials: "omit" });
      const text = await response.text();
      status.textContent = `${response.status} ${response.statusText} · ${Math.round(performance.now() - started)} ms`;
      answer.dataset.status = String(response.status);
      answer.textContent = pretty(text);
    } catch (error) {
      status.textContent = "the request failed: " + error;
    }
  });
}
