"""The platform DAGs' on-call notifier: what their ``on_failure_callback`` / ``on_success_callback`` name.

Light on purpose: a DAG file imports it at parse time, so it holds only the Airflow Notifier; the
connection, the object store and the channel classes are reached when a run ends
(:mod:`aldebaran.platform.oncall`). DAG callbacks run in Airflow's DAG processor (in ``dag.test()``, in
the test's process), which resolves connections as a task does.
"""

from __future__ import annotations

from airflow.sdk import BaseNotifier


class OnCallNotifier(BaseNotifier):
    """Page the on-call target with a failed run's findings (``resolve=False``), or resolve the DAG's open
    findings when a run succeeds (``resolve=True``)."""

    def __init__(self, resolve: bool = False) -> None:
        super().__init__()
        self.resolve = resolve

    def render_template_fields(self, context, jinja_env=None) -> None:
        """Nothing to render (no template_fields). Skipped because in ``dag.test()`` the callback's context
        holds the serialized DAG, which cannot build a Jinja environment: rendering would fail the page."""

    def notify(self, context) -> None:
        from aldebaran.platform.oncall import page_from_context

        page_from_context(context, failed=not self.resolve)


def oncall_callbacks() -> dict:
    """The two callbacks, for a DAG's ``@dag(**oncall_callbacks(), ...)``: one line in each DAG file."""
    return {"on_failure_callback": OnCallNotifier(), "on_success_callback": OnCallNotifier(resolve=True)}
