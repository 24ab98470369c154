// Graphile Worker's traffic in phases, through its own API, for queuetop's rate tests.
//   node graphile_flows.mjs CONNECTION_STRING
// Migrates, says {"ready": true}, then for each line read on standard input runs one phase and
// says {"done": "<phase>"} once its jobs are all worked off (runOnce, 4 at a time):
//   mail     300 send_email jobs, every tenth failing for good (maxAttempts 1)
//   reports  200 build_report jobs in the named queue "reports"
// Standard input closing ends it.
import { createRequire } from 'node:module'
import readline from 'node:readline'

const require = createRequire(`${process.env.QUEUETOP_NODE_PEERS}/`)
const { makeWorkerUtils, runOnce, Logger } = require('graphile-worker')
const { Pool } = require('pg')
const [connectionString] = process.argv.slice(2)
const logger = new Logger(() => () => {})

const utils = await makeWorkerUtils({ connectionString, logger })
await utils.migrate()
const taskList = {
  send_email: async (payload) => { if (payload.n % 10 === 0) throw new Error(`smtp said no to ${payload.n}`) },
  build_report: async () => {},
}
console.log(JSON.stringify({ ready: true }))

const lines = readline.createInterface({ input: process.stdin })
for await (const phase of lines) {
  if (phase === 'mail') {
    for (let n = 1; n <= 300; n++) await utils.addJob('send_email', { n }, { maxAttempts: 1 })
  } else if (phase === 'reports') {
    for (let n = 1; n <= 200; n++) await utils.addJob('build_report', { n }, { queueName: 'reports' })
  }
  // runOnce's workers stop when a fetch finds nothing, which a job of a named queue another of
  // them runs makes happen: again until every job of the phase is worked off (or dead).
  const pool = new Pool({ connectionString })
  const left = async () => (await pool.query(
    'SELECT count(*)::int AS n FROM graphile_worker._private_jobs WHERE attempts < max_attempts')).rows[0].n
  do await runOnce({ connectionString, taskList, concurrency: 4, logger })
  while (await left() > 0)
  await pool.end()
  console.log(JSON.stringify({ done: phase }))
}
await utils.release()
process.exit(0)
