#!/bin/sh
# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.
mkdir -p /logs/verifier
if ( [ -x /app/run.sh ] && [ "$(/app/run.sh)" = ready ] ); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
