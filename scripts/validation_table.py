"""Regenerate the validation table of docs/validation.md: `chaosd run` on every shipped scenario, fixed seeds.

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
# (label, scenario, environment): admission control (the capacity policy) is on by default; retry_storm and
# saturation turn it off; aimd and none are the comparisons.
RUNS = [
    ("baseline", "baseline", {}),
    ("saturation", "saturation", {}),
    ("overload", "overload", {}),
    ("overload · aimd", "overload", {"CHAOSD_THROTTLE__POLICY": "aimd"}),
    ("overload · none", "overload", {"CHAOSD_THROTTLE__POLICY": "none"}),
    ("retry_storm", "retry_storm", {}),
    ("retry_storm · capacity", "retry_storm", {"CHAOSD_THROTTLE__ENABLED": "true"}),
    ("retry_storm · aimd", "retry_storm", {"CHAOSD_THROTTLE__ENABLED": "true", "CHAOSD_THROTTLE__POLICY": "aimd"}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="chaosd-validation-")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        "| run | admission | offered ρ (base → peak) | goodput | mean sojourn | p95 sojourn | peak queue | "
        "shed or refused | alarms (kind, detected → cleared) | final state |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, name, env in RUNS:
        report_path = args.out / f"{label.replace(' ', '').replace('·', '-')}.json"
        subprocess.run(
            [sys.executable, "-m", "chaosd", "run", name, "--quiet", "--report", str(report_path)],
            check=True,
            cwd=ROOT,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("CHAOSD_")}, **env},
        )
        r = json.loads(report_path.read_text())
        s = r["latency"]["sojourn"]
        episodes = r["collapse"]["episodes"]
        shown = "; ".join(
            f"{e['kind']} {e['detected_at']:.1f}→{'—' if e['cleared_at'] is None else format(e['cleared_at'], '.1f')} s"
            for e in episodes
        )
        t = r["tasks"]
        refused = f"{100 * t['rejected'] / max(1, t['offered']):.1f} %"
        print(
            f"| {label} | {r['throttle']['policy']} | {r['load']['offered_rho']:.2f} → {r['load']['peak_rho']:.2f} | "
            f"{r['throughput']['goodput_per_s']:.0f}/s | {s['mean'] * 1000:.1f} ms | {s['p95'] * 1000:.1f} ms | "
            f"{r['queue']['max_depth']} | {refused} | {len(episodes)}{' (' + shown + ')' if shown else ''} | "
            f"{r['collapse']['final_state']} |"
        )


if __name__ == "__main__":
    main()
