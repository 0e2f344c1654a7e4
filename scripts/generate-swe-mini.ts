/** Regenerates environments/swe-mini/data/example.jsonl from environments/swe-mini/tasks.ts. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { buildRow } from '../environments/swe-mini/repository.ts';
import { SWE_MINI_TASKS } from '../environments/swe-mini/tasks.ts';

const path = new URL('../environments/swe-mini/data/example.jsonl', import.meta.url).pathname;
mkdirSync(new URL('../environments/swe-mini/data/', import.meta.url).pathname, { recursive: true });
writeFileSync(path, SWE_MINI_TASKS.map((task) => `${JSON.stringify(buildRow(task))}\n`).join(''));
console.log(`wrote ${SWE_MINI_TASKS.length} tasks to ${path}`);
