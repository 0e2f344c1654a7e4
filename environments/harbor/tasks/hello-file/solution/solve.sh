#!/bin/sh
echo 'Hello, world!' > hello.txt
