import { isIP } from "node:net";

// The one test of "reachable from this machine only" for a listen address: the web console's safe
// default, the registry's unauthenticated HTTP, and the lab's receivers and package server, which
// may listen nowhere else (DESIGN.md: everything binds to 127.0.0.0/8).

/** Whether a host to listen on is loopback: 127.0.0.0/8, ::1 (either spelling) or `localhost`. */
export function isLoopback(host: string): boolean {
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  if (isIP(host) === 6) return host === "::1" || host === "0:0:0:0:0:0:0:1";
  return false;
}
