"""The results page (docs/results.md) is what benchmarks/results_page.py renders from the stored
JSON: a figure edited by hand, or a JSON re-run without re-rendering, fails here."""

from __future__ import annotations

import json
import re

from bench_scripts import load_script


def test_the_page_is_what_its_json_renders():
    page = load_script("results_page")
    assert page.PAGE.read_text() == page.render(), \
        "docs/results.md differs from its JSON: run python -m benchmarks.results_page"
    assert page.PAGE.read_text().count("\n") <= 400


def test_every_link_into_the_details_names_a_heading_there():
    page = load_script("results_page")
    heads = {page.anchor(h) for h in re.findall(r"^#+ (.+)$", page.DETAILS.read_text(), flags=re.M)}
    links = re.findall(r"notes/results-details\.md#([\w-]+)", page.PAGE.read_text())
    assert links and set(links) <= heads


def test_a_changed_figure_changes_the_page(monkeypatch, tmp_path):
    page = load_script("results_page")
    for rel in ("gaia-gpu6430.json", "router_bounds.json", "schedulers.json"):
        dst = tmp_path / rel
        dst.write_text((page.RESULTS / rel).read_text())
    doc = json.loads((tmp_path / "gaia-gpu6430.json").read_text())
    doc["results"]["pbkv-ta"]["hit_rate"] = 0.0123
    (tmp_path / "gaia-gpu6430.json").write_text(json.dumps(doc))
    monkeypatch.setattr(page, "RESULTS", tmp_path)
    text = page.eviction()
    assert "| gaia | 6,430 (a quarter) |" in text and "pbkv-ta 28.4" not in text.split("| gaia | 6,430")[1].split("\n")[0]
    assert "-22.3" in text         # pbkv-ta is now the worst agentrt policy there: 1.2% against LRU's 23.5%
    assert "No stored JSON for the regime sweep" in page.regimes()
