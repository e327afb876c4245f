// chit dashboard: confirmations for actions, and live progress and output on a
// job's page.
// Plain script, no library; the pages work without it (minus confirmations
// and live updates).
"use strict";

document.addEventListener("submit", function (event) {
  var form = event.target;
  var message = form.getAttribute("data-confirm");
  if (message && !window.confirm(message)) {
    event.preventDefault();
  }
});

document.addEventListener("DOMContentLoaded", function () {
  var panel = document.querySelector("[data-events]");
  if (!panel || !window.EventSource) {
    return;
  }
  var TERMINAL = ["succeeded", "failed", "cancelled"];
  var source = new EventSource(panel.getAttribute("data-events"));
  var live = document.getElementById("live");

  function show(job) {
    var badge = document.querySelector("#state [data-state]");
    if (badge) {
      badge.textContent = job.state;
      badge.className = "badge state-" + job.state;
    }
    var bar = document.getElementById("progress-bar");
    var text = document.getElementById("progress-text");
    var done = job.progress.done, total = job.progress.total;
    if (total) {
      bar.max = total;
      bar.value = done || 0;
      bar.hidden = false;
      text.textContent = (done || 0) + "/" + total;
    } else if (done !== null && done !== undefined) {
      text.textContent = String(done);
    }
    var message = document.getElementById("progress-message");
    if (message) {
      message.textContent = job.progress.message || "";
    }
    var attempts = document.getElementById("attempts");
    if (attempts) {
      attempts.textContent = job.attempts + " of " + job.max_attempts;
    }
    if (TERMINAL.indexOf(job.state) >= 0) {
      source.close();
      // The result, the error and the attempts are on the page itself.
      window.setTimeout(function () { window.location.replace(window.location.pathname); }, 300);
    }
  }

  function onEvent(event) {
    if (live) {
      live.hidden = false;
    }
    show(JSON.parse(event.data));
  }

  // Output values: the page shows those written before it opened; the stream
  // sends every value, so only those after the last shown are added.
  var list = document.getElementById("output-list");
  var after = list ? Number(list.getAttribute("data-after") || 0) : 0;
  source.addEventListener("output", function (event) {
    var value = JSON.parse(event.data);
    if (!list || value.seq <= after) {
      return;
    }
    after = value.seq;
    var item = document.createElement("li");
    item.setAttribute("data-seq", String(value.seq));
    var attempt = document.createElement("span");
    attempt.className = "muted";
    attempt.textContent = "#" + value.attempt;
    var data = document.createElement("span");
    data.className = "mono";
    data.textContent = JSON.stringify(value.data);
    item.appendChild(attempt);
    item.appendChild(document.createTextNode(" "));
    item.appendChild(data);
    list.appendChild(item);
    var none = document.getElementById("output-none");
    if (none) {
      none.hidden = true;
    }
    if (live) {
      live.hidden = false;
    }
  });
  source.addEventListener("state", onEvent);
  source.addEventListener("progress", onEvent);
  source.addEventListener("gone", function () { source.close(); });
});
