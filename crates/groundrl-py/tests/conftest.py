"""Shared paths: the repository's examples, fixtures and scripts (the tests run from a clone)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COCO_FIXTURE = ROOT / "crates/groundrl-score/tests/fixtures/coco-parity"
GROUNDING_FIXTURES = ROOT / "crates/groundrl-core/tests/fixtures/grounding"
REWARD_SPECS = ROOT / "scripts/bench/reward-specs"
EXAMPLES = ROOT / "examples/reward"

# scripts/parity/coco_parity.py (random COCO cases) and scripts/bench/rewards_*.py (the rules in
# Python) are imported by the parity tests, so the tests and the scripts share one generator.
sys.path.insert(0, str(ROOT / "scripts/parity"))
sys.path.insert(0, str(ROOT / "scripts/bench"))
