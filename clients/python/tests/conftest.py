"""Fixtures: ``service`` starts the real binary for one test and, whatever
happens, kills it and removes its folder; a failed test shows its logs."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from service import Service


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for service in getattr(item, "services", []):
            report.sections.append(("service logs", service.logs()))


@pytest.fixture
def start_service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """``start_service(*flags)``: a server of this test's own (pytest removes ``tmp_path``)."""
    started: list[Service] = []
    request.node.services = started

    def start(*flags: str) -> Service:
        folder = tmp_path / f"service-{len(started)}"
        folder.mkdir()
        service = Service(folder, *flags)
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()
