"""Regenerate the README's validation table: `chaosd run` on every shipped scenario, fixed seeds.

Usage: python scripts/validation_table.py [--out DIR]   (prints a Markdown table; reports go to DIR)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (label, scenario, environment): the throttle is on by default; retry_storm and saturation turn it off.
RUNS = [
    ("baseline", "baseline", {}),
    ("saturation", "saturation", {}),
    ("overload", "overload", {}),
    ("overload − throttle", "overload", {"CHAOSD_THROTTLE__ENABLED": "false"}),
    ("retry_storm", "retry_storm", {}),
    ("retry_storm + throttle", "retry_storm", {"CHAOSD_THROTTLE__ENABLED": "true"}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="chaosd-validation-")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        "| scenario | seed | offered ρ (base → peak) | mean sojourn | p95 sojourn | peak queue | "
        "collapse episodes | throttle actions | final state |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for label, name, env in RUNS:
        report_path = args.out / f"{label.replace(' ', '')}.json"
        subprocess.run(
            [sys.executable, "-m", "chaosd", "run", name, "--quiet", "--report", str(report_path)],
            check=True,
            cwd=ROOT,
            env={**os.environ, **env},
        )
        r = json.loads(report_path.read_text())
        s = r["latency"]["sojourn"]
        episodes = r["collapse"]["episodes"]
        shown = "; ".join(
            f"{e['detected_at']:.1f}→{'—' if e['cleared_at'] is None else format(e['cleared_at'], '.1f')} s"
            for e in episodes
        )
        throttle = r["throttle"]
        actions = f"{throttle['decreases']}↓ {throttle['increases']}↑" if throttle["enabled"] else "off"
        print(
            f"| {label} | {r['seed']} | {r['load']['offered_rho']:.2f} → {r['load']['peak_rho']:.2f} | "
            f"{s['mean'] * 1000:.1f} ms | {s['p95'] * 1000:.1f} ms | {r['queue']['max_depth']} | "
            f"{len(episodes)}{' (' + shown + ')' if shown else ''} | {actions} | {r['collapse']['final_state']} |"
        )


if __name__ == "__main__":
    main()
