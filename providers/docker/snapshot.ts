/**
 * A sandbox's snapshot: its container committed as an image (paused meanwhile), under a name the
 * operator allows (`host-access.ts`); an existing image is replaced only when it is itself a
 * snapshot.
 */
import type Docker from 'dockerode';
import { SYSTEM_LABELS } from '../shared/labels.ts';
import { DOCKER_LABEL_PREFIX } from './container-listing.ts';
import { wrapDockerError } from './docker-errors.ts';
import type { HostAccessPolicy } from './host-access.ts';

/** Commits container `containerName` of sandbox `id` as `image` (`repo[:tag]`, default tag `latest`). */
export async function commitSnapshot(
  docker: Docker,
  containerName: string,
  hostAccess: HostAccessPolicy,
  id: string,
  image: string,
): Promise<{ image: string }> {
  const separator = image.lastIndexOf(':');
  const hasTag = separator > image.lastIndexOf('/');
  const repo = hasTag ? image.slice(0, separator) : image;
  const tag = hasTag ? image.slice(separator + 1) : 'latest';
  let existing: Docker.ImageInspectInfo | null = null;
  try {
    existing = await docker.getImage(`${repo}:${tag}`).inspect();
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode !== 404)
      throw wrapDockerError(error, { operation: 'snapshot', sandboxId: id });
  }
  // A committed container keeps its labels, so a snapshot carries our sandbox-id label.
  const isSnapshot = existing?.Config?.Labels?.[DOCKER_LABEL_PREFIX + SYSTEM_LABELS.sandboxId] !== undefined;
  hostAccess.checkSnapshotTarget(`${repo}:${tag}`, existing === null ? null : { isSnapshot });
  try {
    await docker.getContainer(containerName).commit({ repo, tag, pause: true });
  } catch (error) {
    throw wrapDockerError(error, { operation: 'snapshot', sandboxId: id });
  }
  return { image: `${repo}:${tag}` };
}
