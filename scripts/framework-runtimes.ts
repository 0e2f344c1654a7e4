/**
 * Makes the runtimes of the Python frameworks the integration tests run (test/frameworks/runtimes.ts),
 * once per host: a runtime made of the same pins is kept. Run by set-up; needs root (chroot).
 *
 *   node scripts/framework-runtimes.ts [names...]
 */
import { installPythonAgentRuntime } from '../harnesses/installed/python-runtime.ts';
import { configuredDebianMirror } from '../images/build.ts';
import { FRAMEWORK_CACHE, FRAMEWORK_RUNTIMES } from '../test/frameworks/runtimes.ts';

const wanted = process.argv.slice(2);
const debianMirror = await configuredDebianMirror();
for (const source of FRAMEWORK_RUNTIMES) {
  if (wanted.length > 0 && !wanted.includes(source.name)) continue;
  const started = Date.now();
  const { dir, built } = await installPythonAgentRuntime(source, {
    cacheDir: FRAMEWORK_CACHE,
    debianMirror,
    log: (message) => process.stderr.write(`[frameworks] ${source.name}: ${message}\n`),
  });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  process.stdout.write(
    `${source.name} ${source.version}: ${built ? `made in ${seconds} s` : 'up to date'} (${dir})\n`,
  );
}
