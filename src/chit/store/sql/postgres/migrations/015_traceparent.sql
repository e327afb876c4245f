-- OpenTelemetry (issue 15): the W3C traceparent of the span that enqueued the
-- job (its producer span), so each attempt's span can name it as its parent
-- (the first attempt) or link to it (retries). NULL when nothing was tracing.
ALTER TABLE chit_jobs ADD COLUMN traceparent text;
