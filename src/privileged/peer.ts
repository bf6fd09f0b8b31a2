import { spawn } from "node:child_process";
import type { Socket } from "node:net";

// Who is on the other end of a Unix socket: the kernel's SO_PEERCRED (pid, uid, gid of the process
// that connected), which no Node.js API exposes. perl (perl-base, Essential in Debian, so on every
// machine the package installs on) reads it from the accepted socket handed to it as stdin: one
// getsockopt, nothing else. The helper acts on this, never on anything the peer says about itself.

export interface PeerCredentials {
  pid: number;
  uid: number;
  gid: number;
}

const GETSOCKOPT = 'use Socket; open(my $s, "+<&=", 0) or die "stdin: $!\\n"; my $c = getsockopt($s, SOL_SOCKET, SO_PEERCRED) or die "getsockopt: $!\\n"; print join(" ", unpack("lll", $c)), "\\n";';

export function peerCredentials(socket: Socket, perl = "perl"): Promise<PeerCredentials> {
  return new Promise((resolve, reject) => {
    // The connection's file descriptor, handed over as a number: the child gets a duplicate, and
    // the socket stays ours alone (a Socket object in stdio would be wrapped again as child.stdin,
    // whose end closes our connection under us).
    const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof fd !== "number" || fd < 0) return reject(new Error("cannot read the peer's credentials: the connection has no file descriptor"));
    const child = spawn(perl, ["-e", GETSOCKOPT], { stdio: [fd, "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    child.once("error", (e) => reject(new Error(`cannot read the peer's credentials: ${perl}: ${e.message}`)));
    child.once("close", (code) => {
      const m = /^(\d+) (\d+) (\d+)\n$/.exec(out);
      if (code !== 0 || !m) return reject(new Error(`cannot read the peer's credentials: ${err.trim() || `perl exited ${code}`}`));
      resolve({ pid: Number(m[1]), uid: Number(m[2]), gid: Number(m[3]) });
    });
  });
}
