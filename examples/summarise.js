// Submits a summarise job, streams its output, sends the approval, shows the result.
"use strict";
const api = "chit";  // chit's routes, mounted by examples/summarise.py
const $ = (id) => document.getElementById(id);

function call(path, body) {
  return fetch(`${api}${path}`, {
    method: "POST",
    headers: { "Authorization": `Bearer ${$("key").value}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  }).then(async (r) => {
    const answer = await r.json();
    if (!r.ok) throw new Error(answer.detail || answer.title || r.statusText);
    return answer;
  });
}

function fail(error) {
  $("error").textContent = String(error.message || error);
  $("error").hidden = false;
}

function follow(job) {
  // events_url (a path from the server's root) carries a token for this job's
  // stream: EventSource sends no key.
  const events = new EventSource(job.events_url);
  events.addEventListener("output", (e) => {
    $("output").textContent += JSON.parse(e.data).data.token;
  });
  events.addEventListener("state", (e) => {
    const status = JSON.parse(e.data);
    $("state").textContent = status.state;
    const waits = status.waiting_for && status.waiting_for.signal === "approval";
    $("approve").hidden = !waits;
    if (["succeeded", "failed", "cancelled"].includes(status.state)) {
      events.close();
      $("result").textContent = JSON.stringify(status.result ?? status.error, null, 2);
      $("result").hidden = false;
    }
  });
  $("approve").onsubmit = (e) => {
    e.preventDefault();
    call(`/jobs/${job.job_id}/signals/approval`, { by: $("by").value })
      .then(() => { $("approve").hidden = true; }, fail);
  };
}

$("submit").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("text").value;
  const cost = text.split(/\s+/).length;  // the estimate; the job reports what it spent
  call("/jobs", { kind: "summarise", payload: { text }, cost }).then(follow, fail);
});
