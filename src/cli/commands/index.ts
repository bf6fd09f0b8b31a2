import type { Command } from "commander";
import { brokerCommand } from "./broker.js";
import { decommissionCommand } from "./decommission.js";
import { doctorCommand } from "./doctor.js";
import { emulateCommand } from "./emulate.js";
import { factsCommand } from "./facts.js";
import { findCommand } from "./find.js";
import { inventoryCommand } from "./inventory.js";
import { labCommand } from "./lab.js";
import { pingCommand } from "./ping.js";
import { provisionCommand } from "./provision.js";
import { provisionerCommand } from "./provisioner.js";
import { puppetCommand } from "./puppet.js";
import { registryCommand } from "./registry.js";
import { rpcCommand } from "./rpc.js";
import { resourceCommand } from "./resource.js";
import { nrpeCommand } from "./nrpe.js";
import { sshCommand } from "./ssh.js";
import { serverCommand } from "./server.js";
import { webCommand } from "./web.js";

// Every subcommand, listed explicitly (no registration by import side effects).
export const commands: (() => Command)[] = [serverCommand, pingCommand, findCommand, inventoryCommand, factsCommand, rpcCommand, emulateCommand, provisionerCommand, provisionCommand, decommissionCommand, labCommand, sshCommand, nrpeCommand, resourceCommand, registryCommand, puppetCommand, brokerCommand, doctorCommand, webCommand];
