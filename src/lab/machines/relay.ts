import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { MusterError } from "../../errors.js";
import { spawnProcess, type MusterProcess } from "../processes.js";
import { masterRelayAddress, PACKAGE_PORT, RELAY_ADDRESS } from "./addresses.js";
import { netnsPath } from "./network.js";
import type { LabMachinesState } from "./state.js";

// Relays between the lab's network namespace and the host's loopback. The broker, the masters and
// the package server stay on 127.0.0.x, where the operator's commands find them; machines reach
// them on the bridge. A Unix socket crosses network namespaces (it is a file), so each relay is two
// socat processes joined by one: a listener on one side and a connector on the other.
//
//   machines -> 10.77.0.1:4222 (socat in the lab namespace) -> relay/nats.sock -> (socat on the host) -> 127.0.0.1:4222
//   operator -> 127.0.2.3:2203 (socat on the host) -> relay/ssh-3.sock -> (socat in the lab namespace) -> 10.77.1.3:22

export interface Endpoint {
  host: string;
  port: number;
  /** The network namespace (a /run/netns path) the endpoint is in; absent: the host's. */
  netns?: string;
}

export interface RelaySpec {
  name: string;
  /** Where connections arrive. */
  listen: Endpoint;
  /** Where they go. */
  target: Endpoint;
}

export interface RelayArgv {
  socket: string;
  /** Listens on `listen`, hands each connection to the socket. */
  listener: string[];
  /** Serves the socket, connects each to `target`. */
  connector: string[];
}

const inNetns = (e: Endpoint, argv: string[]) => (e.netns ? ["nsenter", `--net=${e.netns}`, ...argv] : argv);

/** The two socat command lines of a relay (pure). */
export function relayArgv(spec: RelaySpec, socketDir: string): RelayArgv {
  if (!/^[a-z0-9][a-z0-9-]*$/.test(spec.name)) throw new Error(`relay name must be [a-z0-9-]: ${spec.name}`);
  const socket = join(socketDir, `${spec.name}.sock`);
  // nodelay: NATS and TLS handshakes are small writes; keepalive: a machine that dies mid-connection
  // shows up as a closed socket on the host side in minutes, not never.
  const tcpOpts = "nodelay,keepalive";
  return {
    socket,
    // errors go to stderr, which is the relay's log
    listener: inNetns(spec.listen, ["socat", `TCP-LISTEN:${spec.listen.port},bind=${spec.listen.host},reuseaddr,fork,${tcpOpts}`, `UNIX-CONNECT:${socket}`]),
    // Into a namespace: one socat per connection, started in it. EXEC splits its command on spaces
    // and reads ':' and ',' as its own separators: the inner address escapes them (and takes no options).
    connector: ["socat", `UNIX-LISTEN:${socket},unlink-early,fork,mode=600`, spec.target.netns ? `EXEC:${inNetns(spec.target, ["socat", "-", `TCP\\:${spec.target.host}\\:${spec.target.port}`]).join(" ")}` : `TCP:${spec.target.host}:${spec.target.port},${tcpOpts}`],
  };
}

/**
 * Whether a process listens on TCP `port` in its own network namespace (/proc/<pid>/net/tcp lists
 * the sockets of the namespace the process is in, so this works for a listener in the lab's).
 */
export function listensOn(pid: number, port: number): boolean {
  try {
    const hex = port.toString(16).toUpperCase().padStart(4, "0");
    return readFileSync(`/proc/${pid}/net/tcp`, "utf8")
      .split("\n")
      .slice(1)
      .some((l) => {
        const f = l.trim().split(/\s+/);
        return f[1]?.endsWith(`:${hex}`) && f[3] === "0A"; // local address, state LISTEN
      });
  } catch {
    return false;
  }
}

export interface Relay {
  spec: RelaySpec;
  pids: number[];
  procs: MusterProcess[];
}

/** Start a relay and resolve once both halves are ready (the socket exists, the port listens). */
export async function startRelay(spec: RelaySpec, socketDir: string, o: { logFile: string; detached: boolean }): Promise<Relay> {
  const a = relayArgv(spec, socketDir);
  const connector = spawnProcess(a.connector, o);
  const listener = spawnProcess(a.listener, o);
  const relay = { spec, pids: [connector.pid, listener.pid], procs: [connector, listener] };
  const deadline = Date.now() + 10_000;
  for (;;) {
    const dead = relay.procs.find((p) => p.exitCode() !== undefined);
    if (dead) {
      await Promise.all(relay.procs.map((p) => p.stop()));
      throw new MusterError("MUSTER_USAGE", `relay ${spec.name} (${spec.listen.host}:${spec.listen.port} -> ${spec.target.host}:${spec.target.port}) did not start: socat exited ${dead.exitCode()} (see ${o.logFile})`);
    }
    if (existsSync(a.socket) && listensOn(listener.pid, spec.listen.port)) return relay;
    if (Date.now() > deadline) {
      await Promise.all(relay.procs.map((p) => p.stop()));
      throw new MusterError("MUSTER_TIMEOUT", `relay ${spec.name} not listening on ${spec.listen.host}:${spec.listen.port} after 10 s (see ${o.logFile})`);
    }
    await new Promise((r) => setTimeout(r, 20)); // socat announces readiness nowhere: look at the kernel's socket table
  }
}

/**
 * The lab's own relays onto its bridge (pure): the broker and the package server at RELAY_ADDRESS,
 * each master at its relay address on its own port.
 */
export function labRelaySpecs(o: { netns: string; natsPort: number; packagesPort: number; masters: { host: string; port: number }[] }): RelaySpec[] {
  const ns = netnsPath(o.netns);
  return [
    { name: "broker", listen: { host: RELAY_ADDRESS, port: o.natsPort, netns: ns }, target: { host: "127.0.0.1", port: o.natsPort } },
    { name: "packages", listen: { host: RELAY_ADDRESS, port: PACKAGE_PORT, netns: ns }, target: { host: "127.0.0.1", port: o.packagesPort } },
    ...o.masters.map((m, i) => ({ name: `master-${i + 1}`, listen: { host: masterRelayAddress(i), port: m.port, netns: ns }, target: { host: m.host, port: m.port } })),
  ];
}

/** Start relays one after the other, each ready before the next; what they are, as lab.json keeps them. */
export async function startRelays(specs: RelaySpec[], socketDir: string, o: { logDir: string; detached: boolean; track: (name: string, p: MusterProcess) => void }): Promise<LabMachinesState["relays"]> {
  const relays: Relay[] = [];
  for (const spec of specs) {
    const r = await startRelay(spec, socketDir, { logFile: join(o.logDir, `relay-${spec.name}.log`), detached: o.detached });
    r.procs.forEach((p, i) => o.track(`relay ${spec.name} ${i}`, p));
    relays.push(r);
  }
  return relays.map((r) => ({ name: r.spec.name, pids: r.pids, listen: `${r.spec.listen.host}:${r.spec.listen.port}`, target: `${r.spec.target.host}:${r.spec.target.port}` }));
}
