#!/bin/sh
# GREETING comes from task.toml's [environment.env].
echo "$GREETING" > hello.txt
