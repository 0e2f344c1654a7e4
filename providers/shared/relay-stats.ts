/**
 * What a provider's gateway relays hold, apart from the provider interface so the relays that
 * report it need not import the interface that imports them.
 */

/** What a provider's gateway relays (its means of `exposeGateway`) hold right now. */
export interface RelayStats {
  /** Listening sockets (or other endpoints) that carry gateway reach, over all sandboxes. */
  listeners: number;
  /** Relay connections open, over all sandboxes. */
  connections: number;
  /** Connections closed at once because their sandbox had its maximum open, since start. */
  refusedTotal: number;
}
