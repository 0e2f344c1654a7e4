#!/bin/sh
# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.
mkdir -p /logs/verifier
if ( [ "$(tr -d " \n" < /app/error_count.txt)" = "3" ] ); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
