#!/bin/sh
# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.
mkdir -p /logs/verifier
if ( [ "$(ls /app/photos | sort | tr "\n" " ")" = "beach.jpg city.jpg forest.jpg " ] && [ "$(cat /app/photos/city.jpg)" = city ] ); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
