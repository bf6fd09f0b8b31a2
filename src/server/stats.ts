// Counters reported by rpcutil daemon_stats. Intake counters belong to the process (one NATS message
// is checked once however many nodes it hosts); request counters belong to each node.

export function newIntakeStats() {
  return {
    total: 0, // messages received
    validated: 0, // decoded, signed by a trusted key, fresh, not replayed
    unvalidated: 0, // garbled, wrong types or oversized
    badsig: 0, // signature did not verify or caller not trusted
    ttlexpired: 0, // past ttl or too far in the future
    replayed: 0,
    badtarget: 0, // signed for other targets: replayed onto another node's subject, or direct on broadcast
    badfilter: 0, // verified, but its filter does not parse (no node evaluates it)
  };
}
export type IntakeStats = ReturnType<typeof newIntakeStats>;

export function newNodeStats() {
  return {
    filtered: 0, // did not match the filter
    passed: 0, // matched, allowed by policy and dispatched to an agent
    denied: 0, // matched, but the agent's action policy refused the caller
    replies: 0,
    unknown_agent: 0,
    unknown_action: 0,
    invalid_input: 0, // DDL validation failures (missing or invalid data)
    aborted: 0,
    errors: 0, // handler threw something that was not an RpcError
  };
}
export type NodeStats = ReturnType<typeof newNodeStats>;
