#!/bin/bash
set -euo pipefail
python3 - <<'PY' > /app/total.txt
import csv
rows = csv.DictReader(open("/data/sales.csv"))
print(f"{sum(int(row['quantity']) * float(row['unit_price']) for row in rows):.2f}")
PY
