// Installs pg-boss's and Graphile Worker's schemas the way they install them (pg-boss's start()
// with its queues created, Graphile Worker's migrate()), for `queuetop bench sources`.
//   node install_schemas.mjs CONNECTION_STRING QUEUE...
import { createRequire } from 'node:module'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const PgBoss = require('pg-boss')
const { makeWorkerUtils, Logger } = require('graphile-worker')
const [connectionString, ...queues] = process.argv.slice(2)

const boss = new PgBoss({ connectionString, supervise: false, schedule: false })
boss.on('error', (error) => console.error(error))
await boss.start()
for (const queue of queues) await boss.createQueue(queue)
await boss.stop({ graceful: false, wait: true })

const utils = await makeWorkerUtils({ connectionString, logger: new Logger(() => () => {}) })
await utils.migrate()
await utils.release()
console.log(JSON.stringify({ installed: ['pg-boss', 'graphile-worker'] }))
