/**
 * The API calls on one sandbox's Pod, by sandbox id: create, read, delete, and delete then wait
 * until the kubelet has ended its containers. Every failure leaves here wrapped (`errors.ts`).
 */
import type { CoreV1Api, V1Pod, V1PodList } from '@kubernetes/client-node';
import { apiFailure, wrapApiError } from './errors.ts';

export class Pods {
  readonly #core: CoreV1Api;
  readonly #namespace: string;
  readonly #podName: (id: string) => string;

  constructor(core: CoreV1Api, namespace: string, podName: (id: string) => string) {
    this.#core = core;
    this.#namespace = namespace;
    this.#podName = podName;
  }

  /** Creates the Pod; a field the server does not know is an error, not silently dropped. */
  async create(manifest: V1Pod): Promise<V1Pod> {
    try {
      return await this.#core.createNamespacedPod({
        namespace: this.#namespace,
        body: manifest,
        fieldValidation: 'Strict',
      });
    } catch (error) {
      throw wrapApiError(error, 'Pod create');
    }
  }

  /** @throws GymError `SANDBOX_NOT_FOUND` when there is no such Pod, else as `wrapApiError`. */
  async read(id: string): Promise<V1Pod> {
    try {
      return await this.#core.readNamespacedPod({ name: this.#podName(id), namespace: this.#namespace });
    } catch (error) {
      throw wrapApiError(error, 'Pod read', id);
    }
  }

  /**
   * One page of the namespace's Pods that match `labelSelector`; unwrapped, so the caller says
   * what failed (a health check, a listing).
   */
  listPage(labelSelector: string, limit: number, continueToken?: string): Promise<V1PodList> {
    return this.#core.listNamespacedPod({
      namespace: this.#namespace,
      labelSelector,
      limit,
      ...(continueToken === undefined ? {} : { _continue: continueToken }),
    });
  }

  /** The Pod, or null when it cannot be read (gone, or the API does not answer). */
  async readOrNull(id: string): Promise<V1Pod | null> {
    try {
      return await this.#core.readNamespacedPod({ name: this.#podName(id), namespace: this.#namespace });
    } catch {
      return null;
    }
  }

  /** Deletes the Pod with `gracePeriodSeconds`; one already gone is fine. */
  async delete(id: string, gracePeriodSeconds: number): Promise<void> {
    try {
      await this.#core.deleteNamespacedPod({
        name: this.#podName(id),
        namespace: this.#namespace,
        gracePeriodSeconds,
      });
    } catch (error) {
      if (apiFailure(error).code === 404) return;
      throw wrapApiError(error, 'Pod delete', id);
    }
  }

  /**
   * Deletes the Pod with `grace` and waits (bounded) until the API no longer shows it, that is
   * until the kubelet has ended its containers; forced out of the API past the bound.
   */
  async deleteAndWait(id: string, grace: number): Promise<void> {
    await this.delete(id, grace);
    const deadline = performance.now() + (grace + 10) * 1000;
    for (let attempt = 0; performance.now() < deadline; attempt++) {
      try {
        await this.#core.readNamespacedPod({ name: this.#podName(id), namespace: this.#namespace });
      } catch (error) {
        if (apiFailure(error).code === 404) return;
        throw wrapApiError(error, 'Pod read', id);
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(50 * 2 ** attempt, 500)));
    }
    // Still terminating (a node that does not answer): force it out of the API.
    await this.delete(id, 0);
  }
}
