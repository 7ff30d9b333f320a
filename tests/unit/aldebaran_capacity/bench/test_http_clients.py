"""aldebaran_capacity.bench.http_clients's pure parts: medians per batch and client with the spread, the
httpx ÷ aiohttp ratios, and the report section (the bench itself runs the real channel against a real receiver)."""

from aldebaran_capacity.bench import http_clients


def _run(client, batch, eps, cpu, correct=True):
    return {"client": client, "batch": batch, "deliveries_eps": eps, "cpu_us_per_delivery": cpu, "correct": correct}


def test_summary_takes_medians_and_ratios_per_batch():
    runs = [_run("aiohttp", 1, 9000, 40.0), _run("httpx", 1, 3000, 120.0), _run("aiohttp", 1, 11000, 44.0),
            _run("httpx", 1, 2000, 100.0), _run("aiohttp", 1, 10000, 42.0), _run("httpx", 1, 4000, 110.0, False)]
    got = http_clients.summarize(runs)["1"]
    assert got["aiohttp"] == {"deliveries_eps": 10000, "deliveries_eps_spread": [9000, 11000],
                              "cpu_us_per_delivery": 42.0, "runs": 3, "correct": True}
    assert got["httpx"]["deliveries_eps"] == 3000 and got["httpx"]["correct"] is False
    assert got["httpx_to_aiohttp"] == {"deliveries_eps": 0.3, "cpu_us_per_delivery": 2.62}


def test_report_names_the_command_each_client_and_a_failed_check():
    runs = [_run("aiohttp", 100, 14000, 36.0), _run("httpx", 100, 7000, 55.0, False)]
    result = {"machine": {"date": "2026-11-29", "cores": 2}, "command": "aldebaran bench http-clients --repeats 1",
              "http_clients": {"alerts": 20000, "repeats": 1, "run_size": 2000, "concurrency": 64,
                               "summary": http_clients.summarize(runs), "box": {"other_cores_mean": 0.03, "quiet": True}}}
    text = http_clients.render(result)
    assert text.startswith(http_clients.BEGIN) and text.endswith(http_clients.END)
    assert "`aldebaran bench http-clients --repeats 1`" in text
    assert "| 100 | aiohttp (ships) | 14,000 (14,000–14,000) | 36.0 | yes |" in text
    assert "| 100 | httpx | 7,000 (7,000–7,000) | 55.0 | NO |" in text
    assert "| 100 | httpx ÷ aiohttp | 0.5× | 1.53× | |" in text
