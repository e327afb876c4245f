"""A long AI task end to end: a summary streamed to a browser as it is
written, a person's approval, then a fan-out to child jobs merged into one
answer, under a provider's tokens-per-minute budget.

    CHIT_API_KEYS='demo:admin:demo-key' uvicorn examples.summarise:app   # page and API
    chit worker --app examples.summarise:queue                           # one or more

Open http://127.0.0.1:8000/, paste a text and the key, and watch: the draft
streams in word by word (`job.emit`, the `output` events of
`/chit/jobs/{id}/events`); the job then waits for an approval holding no
worker slot (`job.wait_for`), which the page's button sends (`POST
/chit/jobs/{id}/signals/approval`; the dashboard's job page has the same form,
and so does `chit signal ID approval '{"by": "ana"}'`); approved, it enqueues
one child job a paragraph and waits for them without a slot either
(`job.wait_for_jobs`), then merges their results.

A waiting job's next attempt runs the handler from the top, so everything
before a wait sits in `job.step`: the draft (and its streaming) happens once,
and the children are enqueued once. `model_tokens` stands in for a model
provider's streaming call; swap in your client's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse
from pydantic import BaseModel, Field

import chit
from chit.api import create_router

queue = chit.Queue()  # CHIT_DATABASE_URL etc. from the environment
PAGE = Path(__file__).with_name("summarise.html")
SCRIPT = Path(__file__).with_name("summarise.js")
DAY = 86_400


class Document(BaseModel):
    text: str = Field(min_length=1, max_length=100_000)


class Paragraph(BaseModel):
    index: int = Field(ge=0)
    text: str = Field(min_length=1)


def model_tokens(text: str) -> Iterator[str]:
    """A stand-in for a model's token stream: the first sentence of each
    paragraph, a word at a time, as slowly as a model writes."""
    for paragraph in paragraphs(text):
        first = re.split(r"(?<=[.!?])\s", paragraph, maxsplit=1)[0]
        for word in first.split():
            time.sleep(0.03)  # a model writes some 30 tokens a second
            yield word + " "


def paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def write_draft(job: chit.JobContext, text: str) -> dict:
    words = []
    for token in model_tokens(text):
        job.emit({"token": token})  # streamed to every listener as it comes
        words.append(token)
    job.report_cost(len(words))  # what the provider really counted
    return {"draft": "".join(words).strip()}


# A provider that allows 20,000 tokens a minute: each job's `cost` (its
# estimate, set at enqueue) counts against it until report_cost corrects it.
@queue.task("summarise", payload=Document, cost_rate="20000/m", max_attempts=3)
def summarise(job: chit.JobContext, doc: Document) -> dict:
    draft = job.step("draft", write_draft, job, doc.text)
    decision = job.wait_for("approval", timeout=DAY)  # frees the slot while a person reads
    if decision is None:
        raise chit.PermanentError("not approved within a day")
    # The children join the job's tenant (the API key's): a job waits only on
    # jobs of its own tenant.
    parts = job.step(
        "parts",
        lambda: [
            queue.enqueue("key_points", Paragraph(index=i, text=p), tenant=job.tenant).id
            for i, p in enumerate(paragraphs(doc.text))
        ],
    )
    done = job.wait_for_jobs(parts, timeout=DAY)  # frees the slot too
    failed = [d.id for d in done if d.state is not chit.State.SUCCEEDED]
    if failed:
        raise chit.PermanentError(f"key points failed for {failed}")
    return {
        "summary": draft["draft"],
        "approved_by": decision.get("by", "someone"),
        "points": [d.result for d in done],
    }


@queue.task("key_points", payload=Paragraph)
def key_points(job: chit.JobContext, part: Paragraph) -> dict:
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", part.text) if s]
    return {"paragraph": part.index, "sentences": len(sentences), "words": len(part.text.split())}


app = FastAPI(title="Summaries")
app.include_router(create_router(queue), prefix="/chit")


@app.get("/", response_class=HTMLResponse, include_in_schema=False)
def page() -> HTMLResponse:
    # The page's own script only: no inline code, so a strict policy holds.
    policy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'"
    return HTMLResponse(PAGE.read_text(), headers={"Content-Security-Policy": policy})


@app.get("/summarise.js", include_in_schema=False)
def script() -> FileResponse:
    return FileResponse(SCRIPT, media_type="text/javascript")
