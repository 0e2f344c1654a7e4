/**
 * What an agent inside a sandbox does with the network, as POSIX shell over busybox applets
 * (`nc`, `wget`, `base64`, `nslookup`, `timeout`), so the same probes run in every provider's
 * smallest image (Docker's busybox, the Kubernetes emulator's, the SSH runtimes' busybox root).
 * A command is this script followed by probe lines; each probe prints one line
 * `<label> <result...>`, so one exec runs many probes (an exec over SSH costs seconds).
 *
 * - `envs LABEL`: the proxy variables, `NAME=value` or `NAME=unset`, space separated.
 * - `fetch LABEL URL`: busybox `wget` (which reads `http_proxy` as real tools do): its exit code
 *   and what it printed.
 * - `connect LABEL HOST:PORT [PROXY_URL]`: a CONNECT by hand with the credential of
 *   `HTTP_PROXY` (or of PROXY_URL), a GET through the tunnel: the proxy's status and the last line.
 * - `direct LABEL HOST PORT`: a socket straight to the address, no proxy: `connected` when the
 *   host's answer came back, else `failed`.
 * - `dns LABEL NAME`: `resolved` or `failed`.
 * - `hold LABEL HOST:PORT SECONDS`: a tunnel left open (its answer in /tmp/egress-hold.out) until
 *   the proxy ends it (exit 0) or SECONDS pass (non-zero).
 * - `held LABEL`: waits up to 60 s (a loaded SSH host is slow to start `hold`) for the tunnel of
 *   `hold` to be open: `open` or `never`.
 */
export const EGRESS_SHELL_CLIENT = String.raw`
proxy_of() {
  p=$\{1#http://}; cred=$\{p%@*}; hostport=$\{p##*@}
  ph=$\{hostport%:*}; pp=$\{hostport##*:}
  auth=$(printf '%s' "$cred" | base64 | tr -d '\n')
}
proxy_of "$\{HTTP_PROXY:-http://none:none@127.0.0.1:1}"
one_line() { tr -d '\r' | tr '\n' ' '; }
envs() {
  line="$1"
  for name in HTTP_PROXY HTTPS_PROXY http_proxy https_proxy NO_PROXY no_proxy; do
    eval "value=\$\{$name-unset}"; line="$line $name=$value"
  done
  echo "$line"
}
fetch() {
  out=$(timeout 20 wget -q -O - "$2" 2>&1); code=$?
  echo "$1 $code $(printf '%s' "$out" | one_line)"
}
connect() {
  if [ -n "$3" ]; then proxy_of "$3"; fi
  out=$(printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\nGET / HTTP/1.0\r\nHost: x\r\n\r\n' "$2" "$2" "$auth" \
    | timeout 20 nc "$ph" "$pp" 2>/dev/null | tr -d '\r')
  status=$(printf '%s\n' "$out" | head -n 1 | cut -d ' ' -f 2)
  echo "$1 $\{status:-0} $(printf '%s\n' "$out" | tail -n 1)"
  proxy_of "$\{HTTP_PROXY:-http://none:none@127.0.0.1:1}"
}
direct() {
  out=$(printf 'GET / HTTP/1.0\r\n\r\n' | timeout 5 nc "$2" "$3" 2>/dev/null)
  case "$out" in *hello*) echo "$1 connected" ;; *) echo "$1 failed" ;; esac
}
dns() {
  if timeout 5 nslookup "$2" >/dev/null 2>&1; then echo "$1 resolved"; else echo "$1 failed"; fi
}
hold() {
  rm -f /tmp/egress-hold.in /tmp/egress-hold.out; mkfifo /tmp/egress-hold.in
  timeout "$3" nc "$ph" "$pp" < /tmp/egress-hold.in > /tmp/egress-hold.out 2>&1 &
  pid=$!
  exec 3> /tmp/egress-hold.in
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n' "$2" "$2" "$auth" >&3
  wait "$pid"; code=$?
  exec 3>&-
  echo "$1 $code"
}
held() {
  for _ in $(seq 600); do
    if grep -q ' 200 ' /tmp/egress-hold.out 2>/dev/null; then echo "$1 open"; return; fi
    sleep 0.1
  done
  echo "$1 never"
}
`.replaceAll('$\\{', '${');

/** A command that runs the probes (lines as the header above says) and nothing else. */
export function egressProbes(probes: string[]): string[] {
  return ['sh', '-c', `${EGRESS_SHELL_CLIENT}\n${probes.join('\n')}\n`];
}

/** The probes' output: each label and the rest of its line. */
export function probeResults(stdout: string): Record<string, string> {
  const results: Record<string, string> = {};
  for (const line of stdout.split('\n')) {
    const space = line.indexOf(' ');
    if (space > 0) results[line.slice(0, space)] = line.slice(space + 1).trim();
  }
  return results;
}
