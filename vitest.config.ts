import { defineConfig } from 'vitest/config';
import { LongestFirstSequencer } from './test/sequencer.ts';

// CI (.ci/run) starts the test cluster and asks for it: there its absence fails the run instead of
// leaving the cluster's files out.
if (process.env.GYM_REQUIRE_K8S_CLUSTER === '1' && !process.env.GYM_TEST_K8S_KUBECONFIG)
  throw new Error(
    'GYM_REQUIRE_K8S_CLUSTER=1 but GYM_TEST_K8S_KUBECONFIG is not set: start scripts/k8s/up.sh',
  );

export default defineConfig({
  test: {
    include: ['**/*.test.ts'],
    exclude: [
      'node_modules/**',
      'dist/**',
      '.tools/**',
      // Against the real test cluster of scripts/k8s/ (up.sh prints the kubeconfig to name here);
      // not part of a run without one, since CI forbids skipped tests.
      ...(process.env.GYM_TEST_K8S_KUBECONFIG ? [] : ['**/*.cluster.int.test.ts']),
    ],
    // Integration files each make their own sandboxes; two at a time suits a 2-core machine.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // The slowest files start first, also on a clean checkout with no timings of its own.
    sequence: { sequencer: LongestFirstSequencer },
  },
});
