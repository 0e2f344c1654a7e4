/**
 * Compares two V8 heap snapshots (`.heapsnapshot`, e.g. from `bench:scale --profile DIR`) by
 * what the objects are: for each constructor or closure name, how many there are and their own
 * size in each, largest growth first. What grows per sandbox or per exec shows at the top.
 *
 *   node scripts/heap-diff.ts BEFORE.heapsnapshot AFTER.heapsnapshot [TOP]
 */
import { readFile } from 'node:fs/promises';

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
  nodes: number[];
  strings: string[];
}

/** Count and own bytes per `type:name`. */
async function tally(path: string): Promise<Map<string, { count: number; bytes: number }>> {
  const snapshot = JSON.parse(await readFile(path, 'utf8')) as Snapshot;
  const fields = snapshot.snapshot.meta.node_fields;
  const types = snapshot.snapshot.meta.node_types[0];
  const width = fields.length;
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const sizeAt = fields.indexOf('self_size');
  const totals = new Map<string, { count: number; bytes: number }>();
  for (let index = 0; index < snapshot.nodes.length; index += width) {
    const type = types[snapshot.nodes[index + typeAt]!]!;
    const rawName = snapshot.strings[snapshot.nodes[index + nameAt]!] ?? '';
    // Strings and numbers are named by their value: group them by type alone.
    const name =
      type === 'string' || type === 'number' || type === 'concatenated string' || type === 'sliced string'
        ? ''
        : rawName.slice(0, 80);
    const key = `${type}:${name}`;
    const entry = totals.get(key) ?? { count: 0, bytes: 0 };
    entry.count += 1;
    entry.bytes += snapshot.nodes[index + sizeAt]!;
    totals.set(key, entry);
  }
  return totals;
}

const [beforePath, afterPath, topArgument] = process.argv.slice(2);
if (beforePath === undefined || afterPath === undefined) {
  console.error('usage: node scripts/heap-diff.ts BEFORE.heapsnapshot AFTER.heapsnapshot [TOP]');
  process.exit(2);
}
const [before, after] = await Promise.all([tally(beforePath), tally(afterPath)]);
const keys = new Set([...before.keys(), ...after.keys()]);
const rows = [...keys].map((key) => {
  const a = before.get(key) ?? { count: 0, bytes: 0 };
  const b = after.get(key) ?? { count: 0, bytes: 0 };
  return { key, countBefore: a.count, countAfter: b.count, bytesBefore: a.bytes, bytesAfter: b.bytes };
});
rows.sort((x, y) => y.bytesAfter - y.bytesBefore - (x.bytesAfter - x.bytesBefore));
const total = (map: Map<string, { bytes: number }>) =>
  [...map.values()].reduce((sum, entry) => sum + entry.bytes, 0);
console.log(`total own bytes: ${total(before)} -> ${total(after)}`);
for (const row of rows.slice(0, Number(topArgument ?? 30))) {
  console.log(
    `${String(row.bytesAfter - row.bytesBefore).padStart(10)} B ${String(row.countAfter - row.countBefore).padStart(7)} objs  ${row.key}  (${row.countBefore} -> ${row.countAfter})`,
  );
}
