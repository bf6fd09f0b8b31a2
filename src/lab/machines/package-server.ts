import { createReadStream, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join, normalize, sep } from "node:path";
import { isLoopback } from "../../security/loopback.js";

// The lab's package server: what a cloud's apt mirror or artifact store is to its machines. It
// serves one directory (the .deb `npm run package` built, and an apt repository when there is one)
// over plain HTTP on loopback; machines reach it through a relay. Read-only, no listings, nothing
// outside the directory.

export interface PackageServer {
  url: string;
  close(): Promise<void>;
}

/** The file a request path names under `root`, or undefined when it would leave it (pure). */
export function servedPath(root: string, urlPath: string): string | undefined {
  let p: string;
  try {
    p = decodeURIComponent(urlPath.split("?")[0]!);
  } catch {
    return undefined;
  }
  if (p.includes("\0")) return undefined;
  const full = normalize(join(root, p));
  return full === root || full.startsWith(root.endsWith(sep) ? root : root + sep) ? full : undefined;
}

const TYPES: Record<string, string> = { deb: "application/vnd.debian.binary-package", gpg: "application/pgp-keys", asc: "application/pgp-signature" };

export async function startPackageServer(o: { dir: string; host: string; port: number; log?: (line: string) => void }): Promise<PackageServer> {
  if (!isLoopback(o.host)) throw new Error(`the package server listens on loopback only, not ${o.host}`);
  const root = normalize(o.dir);
  const server: Server = createServer((req, res) => {
    const done = (status: number, note = "") => o.log?.(`${req.socket.remoteAddress} ${req.method} ${req.url} ${status}${note}`);
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" }).end();
      return done(405);
    }
    const file = servedPath(root, req.url ?? "/");
    let size: number | undefined;
    try {
      const st = file ? statSync(file) : undefined;
      if (st?.isFile()) size = st.size;
    } catch {
      // not there
    }
    if (!file || size === undefined) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return done(404);
    }
    res.writeHead(200, { "content-length": size, "content-type": TYPES[file.split(".").pop() ?? ""] ?? "application/octet-stream" });
    if (req.method === "HEAD") {
      res.end();
      return done(200);
    }
    createReadStream(file)
      .once("error", () => res.destroy())
      .pipe(res)
      .once("finish", () => done(200, ` ${size} bytes`));
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port, o.host, () => {
      const a = server.address();
      const port = typeof a === "object" && a ? a.port : o.port;
      resolve({ url: `http://${o.host}:${port}/`, close: () => new Promise((r) => server.close(() => r())) });
    });
  });
}
