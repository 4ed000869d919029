// Portal behaviour that htmx does not cover: copy buttons, focus after swaps, and the playground stream.
(function () {
  "use strict";

  function copyFrom(button) {
    var source = document.querySelector(button.dataset.copy);
    if (!source) return;
    var text = "value" in source && source.tagName === "INPUT" ? source.value : source.textContent;
    var done = function () {
      var label = button.textContent;
      button.textContent = "Copied";
      button.setAttribute("aria-live", "polite");
      setTimeout(function () { button.textContent = label; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(source, text); done(); });
    } else {
      fallbackCopy(source, text);
      done();
    }
  }

  function fallbackCopy(source, text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } catch (e) { /* the text stays selectable by hand */ }
    document.body.removeChild(area);
    window.lastCopied = text;
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button.copy");
    if (button) { window.lastCopied = null; copyFrom(button); }
  });

  // After a swap, move focus to what the user must notice: a new token, a stale-edit notice, an error.
  function focusNotice(root) {
    var target = (root || document).querySelector("#issued, #stale, .errorbox, [aria-invalid=true]");
    if (target) target.focus();
  }
  document.addEventListener("DOMContentLoaded", function () { focusNotice(document); });
  document.addEventListener("htmx:afterSwap", function (event) { focusNotice(event.target); });

  // htmx 2 swaps only 2xx answers. A 422 carries the form re-rendered with its errors, so it swaps
  // into its target like a success (focusNotice then moves focus to the first invalid field). Any
  // other failure a person caused (403, 409, 5xx, no network) must not pass silently: it goes into
  // the page's alert box, which takes focus so screen readers announce it.
  var FAILURES = {
    403: "You are not allowed to do this here.",
    404: "This no longer exists; reload the page.",
    409: "Someone changed this in the meantime; reload the page and try again.",
  };
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.xhr.status === 422) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  function showFailure(event, text) {
    // Background polls (GET every few seconds) retry by themselves; only say so for what a person did.
    var verb = (event.detail.requestConfig && event.detail.requestConfig.verb) || "get";
    if (verb === "get") return;
    var box = document.getElementById("request-error");
    if (!box) return;
    box.textContent = text;
    box.hidden = false;
    box.focus();
  }
  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr.status;
    if (status === 422) return;
    var text = FAILURES[status] || "The server failed to handle this (" + status + "); try again in a moment.";
    showFailure(event, text);
  });
  document.addEventListener("htmx:sendError", function (event) {
    showFailure(event, "The server could not be reached; check the connection and try again.");
  });
  document.addEventListener("htmx:beforeRequest", function (event) {
    if ((event.detail.requestConfig && event.detail.requestConfig.verb) === "get") return;
    var box = document.getElementById("request-error");
    if (box && document.activeElement !== box) box.hidden = true;
  });

  // A service deleted while its page is open: its status poll answers 404, so go back to the list.
  document.addEventListener("htmx:responseError", function (event) {
    var target = event.detail.elt;
    if (event.detail.xhr.status === 404 && target && target.dataset.goneUrl) {
      window.location.assign(target.dataset.goneUrl);
    }
  });

  // Tables on a phone: below 640 px app.css stacks every table with a header into one card per row.
  // Each cell then shows its column's name (data-label, from the header) and keeps the header's data-cell
  // role: "name" and "lead" cells (name, phase, ready) come first, "wide" cells take the whole line.
  function labelCells(root) {
    (root || document).querySelectorAll("main table").forEach(function (table) {
      if (!table.tHead || !table.tHead.rows.length) return;
      var columns = [];
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
        var hidden = th.querySelector(".sr-only") && th.textContent.trim() === th.querySelector(".sr-only").textContent.trim();
        for (var i = 0; i < th.colSpan; i++) {
          columns.push({ label: hidden ? "" : th.textContent.trim(), role: th.dataset.cell || "" });
        }
      });
      var rows = [];
      Array.prototype.forEach.call(table.tBodies, function (body) { rows.push.apply(rows, body.rows); });
      if (table.tFoot) rows.push.apply(rows, table.tFoot.rows);
      rows.forEach(function (row) {
        var at = 0;
        Array.prototype.forEach.call(row.cells, function (cell) {
          var column = columns[at];
          if (column && cell.colSpan === 1) {
            if (column.label && cell.tagName === "TD") cell.setAttribute("data-label", column.label);
            if (column.role) cell.setAttribute("data-cell", column.role);
          }
          at += cell.colSpan;
        });
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { labelCells(document); });
  document.addEventListener("htmx:afterSettle", function () { labelCells(document); });

  // The playground: POST the prompt, read newline-delimited JSON events as they arrive.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.id !== "playground-form") return;
    event.preventDefault();
    var out = document.getElementById("pg-output");
    var answer = document.getElementById("pg-answer");
    var meta = document.getElementById("pg-meta");
    var send = document.getElementById("pg-send");
    var key = document.getElementById("pg-key");
    var keyError = document.getElementById("pg-key-error");
    var help = "pg-key-help";
    keyError.hidden = true;
    key.removeAttribute("aria-invalid");
    key.setAttribute("aria-describedby", help);
    ["pg-ttft", "pg-tps", "pg-tokens"].forEach(function (id) { document.getElementById(id).textContent = "–"; });
    out.hidden = false;
    answer.textContent = "";
    meta.textContent = "Sending…";
    send.disabled = true;
    // Disabling the focused button drops the focus to the page: give it back once the answer is in, and
    // move it to the message when there is an error, so a keyboard user hears it and stays in place.
    var finish = function () {
      send.disabled = false;
      if (document.activeElement === document.body || document.activeElement === null) send.focus();
    };
    var fail = function (text) { meta.textContent = "Error: " + text; finish(); meta.focus(); };
    // A refused key (a line break, characters a header cannot carry) is shown at its field, which takes the focus.
    var failKey = function (text) {
      keyError.textContent = text;
      keyError.hidden = false;
      key.setAttribute("aria-invalid", "true");
      key.setAttribute("aria-describedby", "pg-key-error " + help);
      meta.textContent = "Not sent: see the inference key.";
      send.disabled = false;
      key.focus();
    };
    fetch(form.action, { method: "POST", body: new FormData(form), credentials: "same-origin",
                         headers: { "X-CSRFToken": form.querySelector("[name=csrfmiddlewaretoken]").value } })
      .then(function (response) {
        var reader = response.body.getReader();
        var decoder = new TextDecoder();
        var buffer = "";
        function handle(line) {
          if (!line.trim()) return;
          var e = JSON.parse(line);
          if (e.event === "start") {
            meta.textContent = "Streaming via " + e.via + "…";
          } else if (e.event === "text") {
            answer.textContent += e.text;
          } else if (e.event === "done") {
            meta.textContent = "Done.";
            document.getElementById("pg-ttft").textContent = e.ttft_s == null ? "–" : (e.ttft_s * 1000).toFixed(1) + " ms";
            document.getElementById("pg-tps").textContent = e.tokens_per_s == null ? "–" : e.tokens_per_s.toFixed(1);
            document.getElementById("pg-tokens").textContent = e.tokens;
          } else if (e.event === "error") {
            if (e.field === "inference_key") failKey(e.message); else fail(e.message);
          }
        }
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) { handle(buffer); finish(); return; }
            buffer += decoder.decode(chunk.value, { stream: true });
            var lines = buffer.split("\n");
            buffer = lines.pop();
            lines.forEach(handle);
            return pump();
          });
        }
        return pump();
      })
      .catch(function (error) { fail(String(error)); });
  });
})();

// The service form refreshes its parts on change, except for the deployment mode (which has its own request).
// Done here, not as an hx-trigger filter, because htmx evaluates filters with eval, which the CSP forbids.
document.addEventListener("htmx:confirm", function (event) {
  var form = event.detail.elt;
  var trigger = event.detail.triggeringEvent;
  if (form.id === "service-form" && trigger && trigger.target && trigger.target.name === "deployment_mode") {
    event.preventDefault();
  }
});
