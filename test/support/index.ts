// Process starters live in src/lab (the lab uses them too); tests import them from here.
export { startNats, waitForPort, type NatsHandle } from "../../src/lab/nats.js";
export { freePort } from "../../src/lab/ports.js";
