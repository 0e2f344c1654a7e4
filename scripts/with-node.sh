#!/bin/sh
# Runs a command with a Node >= 22 first on PATH: the one scripts/setup.sh installed into
# .tools/node when the machine's own Node is older, else the machine's.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -x "$root/.tools/node/node_modules/node/bin/node" ]; then
  PATH="$root/.tools/node/node_modules/node/bin:$PATH"
  export PATH
fi
exec "$@"
