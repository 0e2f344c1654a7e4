#!/bin/bash
# Writes every metric to reward.json (Harbor reads it before reward.txt).
python3 - <<'PY'
import json
expected = 4 * 2.50 + 10 * 0.85 + 7.20 + 2 * 19.99
try:
    text = open("/app/total.txt").read().strip()
    value = float(text)
    correct = abs(value - expected) < 0.005
    formatted = len(text.split(".")[-1]) == 2 and "." in text
except (OSError, ValueError):
    correct = formatted = False
json.dump(
    {"reward": 1.0 if correct and formatted else 0.0, "correct_value": float(correct), "two_decimals": float(formatted)},
    open("/logs/verifier/reward.json", "w"),
)
PY
