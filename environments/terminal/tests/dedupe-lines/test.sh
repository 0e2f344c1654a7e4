#!/bin/sh
# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.
mkdir -p /logs/verifier
if ( [ "$(cat /app/unique.txt)" = "$(printf "b@x.org\na@x.org\nc@x.org")" ] ); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
