/**
 * Writes environments/terminal: eight shell tasks in the style of Terminal-Bench (an
 * instruction, an image, a tests/ folder whose test.sh writes a reward to
 * /logs/verifier/reward.txt, and a reference solution for the oracle).
 */
import { mkdirSync, writeFileSync } from 'node:fs';

interface TerminalTask {
  id: string;
  instruction: string;
  /** Run in the sandbox before the agent (the task's starting state). */
  setup: string;
  solution: string;
  /** A POSIX sh test body; it exits 0 when the task is done. */
  check: string;
}

const TASKS: TerminalTask[] = [
  {
    id: 'count-errors',
    instruction:
      'The file /app/server.log holds a web server log. Write the number of lines that contain the word ERROR to /app/error_count.txt (just the number).',
    setup:
      'mkdir -p /app && printf "INFO start\\nERROR disk full\\nINFO ok\\nERROR timeout\\nWARN slow\\nERROR refused\\n" > /app/server.log',
    solution: 'grep -c ERROR /app/server.log > /app/error_count.txt',
    check: '[ "$(tr -d " \\n" < /app/error_count.txt)" = "3" ]',
  },
  {
    id: 'rename-extensions',
    instruction:
      'In /app/photos every image has the extension .jpeg. Rename them all to .jpg, keeping their names otherwise.',
    setup: 'mkdir -p /app/photos && for n in beach city forest; do echo "$n" > /app/photos/$n.jpeg; done',
    solution: 'cd /app/photos && for f in *.jpeg; do mv "$f" "${f%.jpeg}.jpg"; done',
    check:
      '[ "$(ls /app/photos | sort | tr "\\n" " ")" = "beach.jpg city.jpg forest.jpg " ] && [ "$(cat /app/photos/city.jpg)" = city ]',
  },
  {
    id: 'csv-total',
    instruction:
      'The CSV /app/sales.csv has a header row and columns item,quantity,price. Write the total revenue (sum of quantity times price) to /app/total.txt as a number with two decimals.',
    setup:
      'mkdir -p /app && printf "item,quantity,price\\npen,3,1.50\\nbook,2,12.25\\nmug,1,8.00\\n" > /app/sales.csv',
    solution:
      'python3 -c "import csv; rows=list(csv.DictReader(open(\'/app/sales.csv\'))); print(f\'{sum(int(r[\\"quantity\\"])*float(r[\\"price\\"]) for r in rows):.2f}\')" > /app/total.txt',
    check: '[ "$(tr -d " \\n" < /app/total.txt)" = "37.00" ]',
  },
  {
    id: 'fix-permissions',
    instruction:
      'The script /app/run.sh cannot be executed. Make it executable by its owner and make sure it prints "ready" when run.',
    setup: 'mkdir -p /app && printf "#!/bin/sh\\necho ready\\n" > /app/run.sh && chmod 600 /app/run.sh',
    solution: 'chmod u+x /app/run.sh',
    check: '[ -x /app/run.sh ] && [ "$(/app/run.sh)" = ready ]',
  },
  {
    id: 'json-extract',
    instruction:
      'The file /app/users.json is a JSON list of users with "name" and "active" fields. Write the names of the active users to /app/active.txt, one per line, sorted alphabetically.',
    setup:
      'mkdir -p /app && echo \'[{"name":"zoe","active":true},{"name":"adam","active":false},{"name":"mia","active":true}]\' > /app/users.json',
    solution:
      "python3 -c \"import json; print('\\n'.join(sorted(u['name'] for u in json.load(open('/app/users.json')) if u['active'])))\" > /app/active.txt",
    check: '[ "$(cat /app/active.txt)" = "$(printf "mia\\nzoe")" ]',
  },
  {
    id: 'git-commit',
    instruction:
      'The directory /app/project is a git repository with an uncommitted file notes.txt. Commit it with the message "Add notes" (author name gym, email gym@example.invalid).',
    setup:
      'mkdir -p /app/project && cd /app/project && git init -q -b main && git -c user.name=gym -c user.email=gym@example.invalid commit -q --allow-empty -m init && echo todo > notes.txt',
    solution:
      'cd /app/project && git add notes.txt && git -c user.name=gym -c user.email=gym@example.invalid commit -q -m "Add notes"',
    check:
      'cd /app/project && [ "$(git log -1 --format=%s)" = "Add notes" ] && [ -z "$(git status --porcelain)" ]',
  },
  {
    id: 'dedupe-lines',
    instruction:
      'The file /app/emails.txt has duplicate lines. Write its unique lines to /app/unique.txt in the order they first appear.',
    setup: 'mkdir -p /app && printf "b@x.org\\na@x.org\\nb@x.org\\nc@x.org\\na@x.org\\n" > /app/emails.txt',
    solution: "awk '!seen[$0]++' /app/emails.txt > /app/unique.txt",
    check: '[ "$(cat /app/unique.txt)" = "$(printf "b@x.org\\na@x.org\\nc@x.org")" ]',
  },
  {
    id: 'archive-logs',
    instruction:
      'Create a gzip-compressed tar archive /app/logs.tar.gz holding every .log file in /app/logs (and nothing else), then delete those .log files.',
    setup:
      'mkdir -p /app/logs && echo one > /app/logs/a.log && echo two > /app/logs/b.log && echo keep > /app/logs/readme.txt',
    solution: 'cd /app/logs && tar -czf /app/logs.tar.gz *.log && rm -f *.log',
    check:
      '[ "$(tar -tzf /app/logs.tar.gz | sort | tr "\\n" " ")" = "a.log b.log " ] && [ ! -e /app/logs/a.log ] && [ -e /app/logs/readme.txt ]',
  },
];

const root = new URL('../environments/terminal/', import.meta.url).pathname;
const rows = TASKS.map((task) => {
  const testsDir = `tests/${task.id}`;
  mkdirSync(`${root}${testsDir}`, { recursive: true });
  writeFileSync(
    `${root}${testsDir}/test.sh`,
    `#!/bin/sh\n# Writes 1 to /logs/verifier/reward.txt when the task is done, else 0.\nmkdir -p /logs/verifier\nif ( ${task.check} ); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n`,
    { mode: 0o755 },
  );
  return {
    id: task.id,
    instruction: task.instruction,
    setup: task.setup,
    solution: task.solution,
    tests: testsDir,
    workdir: '/app',
    image: 'gym/debian-base:latest',
    verifier_timeout_sec: 60,
  };
});
writeFileSync(`${root}data/example.jsonl`, rows.map((row) => `${JSON.stringify(row)}\n`).join(''));
console.log(`wrote ${rows.length} terminal tasks`);
