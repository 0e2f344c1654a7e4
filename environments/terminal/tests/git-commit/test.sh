#!/bin/sh
# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.
mkdir -p /logs/verifier
if ( cd /app/project && [ "$(git log -1 --format=%s)" = "Add notes" ] && [ -z "$(git status --porcelain)" ] ); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
