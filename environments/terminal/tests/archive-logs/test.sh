#!/bin/sh
# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.
mkdir -p /logs/verifier
if ( [ "$(tar -tzf /app/logs.tar.gz | sort | tr "\n" " ")" = "a.log b.log " ] && [ ! -e /app/logs/a.log ] && [ -e /app/logs/readme.txt ] ); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
