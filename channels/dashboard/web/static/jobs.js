// The Jobs panel: the signed-in user's scheduled jobs (what, when, next run, runs missed),
// paused, resumed and deleted through /api/jobs, and the user's time zone. /api/jobs/events
// tells of each run: the list is read again, and the open thread reloads when the run posted
// in it.

import { api } from "./api.js";
import { $, clear, el, say } from "./dom.js";

const jobPath = (id, tail = "") => `/api/jobs/${encodeURIComponent(id)}${tail}`;
let events = null;

/** Read and list the user's jobs that are not done. */
export async function showJobs() {
  const list = $("job-list");
  let answer;
  try {
    answer = await api("GET", "/api/jobs");
  } catch (error) {
    say("job-error", error.message);
    return false;
  }
  say("job-error", "");
  $("job-zone").textContent = `Times in ${answer.timeZone}.`;
  $("zone-name").value = answer.timeZone;
  const jobs = answer.jobs.filter((job) => job.state !== "done");
  clear(list).append(...jobs.map(jobItem));
  if (!jobs.length) {
    list.append(el("li", { className: "muted" },
                   "No scheduled jobs. Ask the agent, or type /remind in 10m Call mum"));
  }
  return true;
}

function jobItem(job) {
  const act = (method, path) => async () => {
    try {
      await api(method, path);
    } catch (error) {
      say("job-error", error.message);
    }
    await showJobs();
  };
  const paused = job.state === "paused";
  return el("li", { dataset: { testid: "job", jobId: job.id, state: job.state } },
    el("strong", {}, job.text),
    el("span", { className: "muted small" }, ` ${job.schedule} · ${job.threadId}`),
    el("span", { className: "small", dataset: { testid: "job-next" } },
       paused ? " paused" : ` next ${job.nextRunLocal}`),
    job.misses ? el("span", { className: "small error", dataset: { testid: "job-misses" } },
                    ` · ${job.misses} missed`) : null,
    el("button", { type: "button", onclick: act("POST", jobPath(job.id, paused ? "/resume" : "/pause")) },
       paused ? "Resume" : "Pause"),
    el("button", { type: "button", onclick: act("DELETE", jobPath(job.id)) }, "Delete"));
}

/** Follow the runs of the user's jobs (once signed in). */
function listen() {
  if (events) return;
  events = new EventSource("/api/jobs/events");
  events.addEventListener("job.completed", (message) => {
    const run = JSON.parse(message.data);
    showJobs();
    const open = document.querySelector('[data-testid="thread"] [aria-current="page"]');
    if (open && open.closest("li").dataset.threadId === run.threadId) open.click();
  });
}

$("zone-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await api("PUT", "/api/jobs/time-zone", { timeZone: $("zone-name").value.trim() });
  } catch (error) {
    say("job-error", error.message);
    return;
  }
  await showJobs();
});

$("tab-jobs").addEventListener("click", async () => {
  if (await showJobs()) listen();
});
