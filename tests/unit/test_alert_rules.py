"""The shipped Prometheus alert rules (docs/alerts/chit-rules.yml), checked and
unit-tested by promtool over the metrics chit itself gives: a kind whose every
job fails pages once, a kind failing in part pages with a percentage, a
healthy one stays quiet, and no figure is infinite."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import chit
from chit.api.metrics import render
from support import TESTS
from support.dashboard import finished

RULES = TESTS.parent / "docs" / "alerts" / "chit-rules.yml"
OPERATIONS = TESTS.parent / "docs" / "operations.md"
LAST_HOUR = ("chit_jobs_failed_last_hour", "chit_jobs_succeeded_last_hour")
LAST_HOUR += ("chit_jobs_failure_rate_last_hour",)


def promtool(*args: str) -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail(
            "promtool is not installed: apt-get install prometheus (`make test` does)",
            pytrace=False,
        )
    proc = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_the_rules_are_valid() -> None:
    assert "SUCCESS: 4 rules found" in promtool("check", "rules", str(RULES))


def test_the_operations_guide_shows_the_shipped_rules() -> None:
    assert f"```yaml\n{RULES.read_text()}```" in OPERATIONS.read_text()


def scraped(tmp_path: Path) -> list[dict[str, str]]:
    """The last-hour series of a real /metrics text, as promtool input series
    (the same value for 20 minutes)."""
    queue = chit.Queue(f"sqlite:///{tmp_path / 'chit.db'}")
    try:
        outcomes = {"doomed": (0, 12), "flaky": (40, 10), "fine": (50, 1)}
        for kind, (ok, bad) in outcomes.items():
            for _ in range(ok):
                finished(queue, kind=kind, result={})
            for _ in range(bad):
                finished(queue, kind=kind, error="RuntimeError: no luck")
        text = render(queue.store, None).decode()
    finally:
        queue.close()
    series = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in LAST_HOUR:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                series.append(
                    {"series": f"{sample.name}{{{labels}}}", "values": f"{sample.value}+0x20"}
                )
    return series


def test_one_page_per_failing_kind_with_a_finite_figure(tmp_path: Path) -> None:
    series = scraped(tmp_path)
    assert {s["series"] for s in series} >= {
        'chit_jobs_failure_rate_last_hour{kind="doomed"}',
        'chit_jobs_failure_rate_last_hour{kind="flaky"}',
    }
    assert not any("inf" in s["values"].lower() for s in series), series
    runbook = "docs/operations.md#the-dead-letter-runbook"
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "15m",
                        "alertname": "ChitJobsAllFailing",
                        "exp_alerts": [
                            {
                                "exp_labels": {"kind": "doomed", "severity": "page"},
                                "exp_annotations": {
                                    "summary": "doomed: all 12 jobs that finished in the "
                                    "last hour failed",
                                    "runbook": runbook,
                                },
                            }
                        ],
                    },
                    {
                        # Not doomed again, and not fine (2 %, one failure).
                        "eval_time": "15m",
                        "alertname": "ChitJobsFailing",
                        "exp_alerts": [
                            {
                                "exp_labels": {"kind": "flaky", "severity": "page"},
                                "exp_annotations": {
                                    "summary": "flaky: 20% of the jobs that finished in the "
                                    "last hour failed",
                                    "runbook": runbook,
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "chit-rules.test.yml"
    path.write_text(json.dumps(tests, indent=2))  # JSON is YAML
    assert "SUCCESS" in promtool("test", "rules", str(path))
