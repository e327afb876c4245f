"""What the HTTP API takes and answers, as pydantic models, one module per
router: the OpenAPI schema and `chit.Client` both use them. Times are ISO 8601
with a timezone. `common` holds the field types and checks they share.

No module here imports FastAPI: `chit.Client` loads them without it."""
