-- protocol.lua -- miltertest script: drives the real retryguard-milter binary
-- through the milter protocol with a real SQLite ledger. Run by
-- miltertest_test.sh, which starts the milter (per-destination actions:
-- hold.example=hold, tag.example=tag, drop.example=drop_duplicates,
-- quiet.example=log_only, trial.example in dry run, reject elsewhere) and passes paths in the environment:
--   RG_SOCKET, RG_LEDGER, RG_FEED, RG_LOG (Postfix-format log the feed reads)

local socket = os.getenv("RG_SOCKET")
local ledger = os.getenv("RG_LEDGER")
local feed = os.getenv("RG_FEED")
local plog = os.getenv("RG_LOG")

local function fail(msg)
  error("FAIL: " .. msg)
end

local function main()
local function connect()
  local conn = mt.connect("unix:" .. socket, 40, 0.05)
  if conn == nil then fail("cannot connect to " .. socket) end
  if mt.conninfo(conn, "localhost", "127.0.0.1") ~= nil then fail("conninfo") end
  if mt.getreply(conn) ~= SMFIR_CONTINUE then fail("connect not continued") end
  return conn
end

-- one message: returns the connection after EOM (reply available with mt.getreply)
local function message(conn, qid, from, rcpts, msgid, subject, body)
  mt.macro(conn, SMFIC_MAIL, "i", qid)
  if mt.mailfrom(conn, "<" .. from .. ">") ~= nil then fail("mailfrom") end
  for _, r in ipairs(rcpts) do
    mt.macro(conn, SMFIC_RCPT, "i", qid)
    if mt.rcptto(conn, "<" .. r .. ">") ~= nil then fail("rcptto") end
  end
  if mt.header(conn, "From", "<" .. from .. ">") ~= nil then fail("header") end
  if mt.header(conn, "Subject", subject) ~= nil then fail("header") end
  if msgid ~= nil then
    if mt.header(conn, "Message-ID", msgid) ~= nil then fail("header") end
  end
  if mt.header(conn, "Date", os.date("!%a, %d %b %Y %H:%M:%S +0000")) ~= nil then fail("header") end
  if mt.bodystring(conn, body) ~= nil then fail("body") end
  if mt.eom(conn) ~= nil then fail("eom") end
  return mt.getreply(conn)
end

local body = "Hello,\r\nthe figures are attached.\r\n\r\nAlice\r\n"
local conn = connect()

-- originals: accepted and recorded under their queue ids
local originals = {
  { "AAA0000001", "bob@defer.example", "<orig-1@Client.Example>" },
  { "AAA0000002", "bob@hold.example", "<orig-2@client.example>" },
  { "AAA0000003", "bob@tag.example", "<orig-3@client.example>" },
  { "AAA0000004", "bob@drop.example", "<orig-4@client.example>" },
  { "AAA0000005", "bob@quiet.example", "<orig-5@client.example>" },
  { "AAA0000007", "bob@trial.example", "<orig-7@client.example>" },
}
for i, o in ipairs(originals) do
  local r = message(conn, o[1], "alice@example.org", { o[2] }, o[3], "Figures " .. i, body)
  if r ~= SMFIR_ACCEPT then fail("original " .. o[1] .. " not accepted: " .. tostring(r)) end
  if mt.eom_check(conn, MT_HDRADD) then fail("original " .. o[1] .. " tagged") end
end

-- the sending Postfix defers every original: the ledger learns it from the log
local f = io.open(plog, "w")
for _, o in ipairs(originals) do
  local domain = string.match(o[2], "@(.*)$")
  f:write(os.date("%b %e %H:%M:%S") .. " sender postfix/smtp[4242]: " .. o[1] .. ": to=<" .. o[2] ..
    ">, relay=mx." .. domain .. "[192.0.2.1]:25, delay=1.2, delays=0.1/0/0.6/0.5, dsn=4.3.5, " ..
    "status=deferred (host mx." .. domain .. "[192.0.2.1] said: 451 4.3.5 System config error " ..
    "(in reply to RCPT TO command))\n")
end
-- and a message that reached the queue without passing through the milter
-- (it was down): the ledger knows its Message-ID from cleanup's log line only
local stamp = os.date("%b %e %H:%M:%S")
f:write(stamp .. " sender postfix/cleanup[4243]: CCC0000001: message-id=<foreign-1@client.example>\n")
f:write(stamp .. " sender postfix/qmgr[4244]: CCC0000001: from=<alice@example.org>, size=600, nrcpt=1 " ..
  "(queue active)\n")
f:write(stamp .. " sender postfix/smtp[4242]: CCC0000001: to=<bob@defer.example>, " ..
  "relay=mx.defer.example[192.0.2.1]:25, delay=1.2, delays=0.1/0/0.6/0.5, dsn=4.3.5, status=deferred " ..
  "(host mx.defer.example[192.0.2.1] said: 451 4.3.5 System config error (in reply to RCPT TO command))\n")
f:close()
if not os.execute(feed .. " " .. ledger .. " " .. plog) then fail("ledger feed failed") end
-- the milter runs with milter.filter_rescan 1s: its identity filter reads that
-- Message-ID within a second
os.execute("sleep 2.5")

-- same Message-ID (other case in the domain, other comment): refused with the explanation
local r = message(conn, "BBB0000001", "alice@example.org", { "bob@defer.example" },
  "(resent) <orig-1@client.example>", "Figures 1", body)
if r ~= SMFIR_REPLYCODE then fail("same Message-ID not refused: " .. tostring(r)) end
-- (miltertest 1.0 answers "Invalid argument" to MT_SMTPREPLY checks: the code and
-- text are checked in the verdict line by miltertest_test.sh)

-- same content, new Message-ID: refused by fingerprint
r = message(conn, "BBB0000002", "alice@example.org", { "bob@defer.example" }, "<new-9@client.example>",
  "Figures 1", "Hello,\nthe figures are attached.   \n\nAlice\n\n")
if r ~= SMFIR_REPLYCODE then fail("same content not refused: " .. tostring(r)) end

-- a new recipient: the duplicate is deleted, the message accepted
r = message(conn, "BBB0000003", "alice@example.org", { "bob@defer.example", "carol@new.example" },
  "<orig-1@client.example>", "Figures 1", body)
if r ~= SMFIR_ACCEPT then fail("resend with a new recipient not accepted: " .. tostring(r)) end
if not mt.eom_check(conn, MT_RCPTDELETE, "<bob@defer.example>") then fail("duplicate recipient not deleted") end
if mt.eom_check(conn, MT_RCPTDELETE, "<carol@new.example>") then fail("new recipient deleted") end

-- hold: quarantined, naming the original
r = message(conn, "BBB0000004", "alice@example.org", { "bob@hold.example" }, "<orig-2@client.example>",
  "Figures 2", body)
if r ~= SMFIR_ACCEPT then fail("hold: not accepted into the hold queue: " .. tostring(r)) end
if not mt.eom_check(conn, MT_QUARANTINE, "retryguard: resend of AAA0000002 still queued") then
  fail("hold: not quarantined")
end

-- tag: header added, accepted
r = message(conn, "BBB0000005", "alice@example.org", { "bob@tag.example" }, "<orig-3@client.example>",
  "Figures 3", body)
if r ~= SMFIR_ACCEPT then fail("tag: not accepted") end
if not mt.eom_check(conn, MT_HDRADD, "X-Retryguard-Resend", "bob@tag.example queued as AAA0000003") then
  fail("tag: header missing")
end

-- drop_duplicates with no new recipient: discarded
r = message(conn, "BBB0000006", "alice@example.org", { "bob@drop.example" }, "<orig-4@client.example>",
  "Figures 4", body)
if r ~= SMFIR_DISCARD then fail("drop_duplicates: not discarded: " .. tostring(r)) end

-- log_only: accepted untouched
r = message(conn, "BBB0000007", "alice@example.org", { "bob@quiet.example" }, "<orig-5@client.example>",
  "Figures 5", body)
if r ~= SMFIR_ACCEPT then fail("log_only: not accepted") end
if mt.eom_check(conn, MT_HDRADD) or mt.eom_check(conn, MT_QUARANTINE) then fail("log_only: changed the message") end

-- dry run (trial.example): the resend would be refused, and goes through unchanged
r = message(conn, "BBB0000014", "alice@example.org", { "bob@trial.example" }, "<orig-7@client.example>",
  "Figures 6", body)
if r ~= SMFIR_ACCEPT then fail("dry run: resend not accepted: " .. tostring(r)) end
if mt.eom_check(conn, MT_HDRADD) or mt.eom_check(conn, MT_QUARANTINE) or
    mt.eom_check(conn, MT_RCPTDELETE, "<bob@trial.example>") then
  fail("dry run: changed the message")
end

-- unrelated mail to the deferring destination
r = message(conn, "BBB0000008", "alice@example.org", { "bob@defer.example" }, "<other@client.example>",
  "Something else", "Different words.\r\n")
if r ~= SMFIR_ACCEPT then fail("unrelated mail not accepted: " .. tostring(r)) end

-- a resend of the message the milter never saw: refused (found through the rescanned filter)
r = message(conn, "BBB0000011", "alice@example.org", { "bob@defer.example" }, "<foreign-1@client.example>",
  "Foreign", "It arrived while the milter was down.\r\n")
if r ~= SMFIR_REPLYCODE then fail("resend of a message known from the log only not refused: " .. tostring(r)) end

-- a resend moments after its original, whose record still waits for the
-- writer's batch (gathered for 100 ms): the lookup has the batch committed
-- first, so the ledger is asked (the identity filter learns a key only once
-- it is committed; miltertest_test.sh counts the lookups it answered). The
-- original has not been tried yet, so it is not "being retried": accepted.
r = message(conn, "AAA0000006", "alice@example.org", { "erin@quick.example" }, "<quick-1@client.example>",
  "Quick", "Sent twice in a hurry.\r\n")
if r ~= SMFIR_ACCEPT then fail("quick original not accepted: " .. tostring(r)) end
r = message(conn, "BBB0000012", "alice@example.org", { "erin@quick.example" }, "<quick-1@client.example>",
  "Quick", "Sent twice in a hurry.\r\n")
if r ~= SMFIR_ACCEPT then fail("resend of a copy not yet tried not accepted: " .. tostring(r)) end

-- bad input: no Message-ID, an unbalanced one, a long subject: never a crash, never a tempfail
r = message(conn, "BBB0000009", "alice@example.org", { "dave@else.example" }, nil, "No id", "x\r\n")
if r ~= SMFIR_ACCEPT then fail("message without Message-ID not accepted") end
r = message(conn, "BBB0000010", "alice@example.org", { "dave@else.example" }, "<unbalanced@x (", string.rep("s", 900),
  "y\r\n")
if r ~= SMFIR_ACCEPT then fail("bad Message-ID not accepted") end

-- a body longer than the fingerprint reads (reinjection.fingerprint.body_limit,
-- 1 MiB): the chunk that reaches the limit is answered SKIP (negotiated), so the
-- MTA keeps the rest to itself, and the message goes on to end of message
mt.macro(conn, SMFIC_MAIL, "i", "BBB0000013")
if mt.mailfrom(conn, "<alice@example.org>") ~= nil then fail("mailfrom") end
mt.macro(conn, SMFIC_RCPT, "i", "BBB0000013")
if mt.rcptto(conn, "<frank@big.example>") ~= nil then fail("rcptto") end
if mt.header(conn, "Subject", "Big") ~= nil then fail("header") end
if mt.header(conn, "Message-ID", "<big-1@client.example>") ~= nil then fail("header") end
-- body chunks of 60000 bytes (one milter command each, as an MTA sends them)
local chunk = string.rep(string.rep("0123456789abcdef", 4) .. "\r\n", 909) .. string.rep("x", 54)
local sent, skipped = 0, false
for _ = 1, 40 do
  if mt.bodystring(conn, chunk) ~= nil then fail("big body chunk") end
  sent = sent + #chunk
  r = mt.getreply(conn)
  if r == SMFIR_SKIP then skipped = true break end
  if r ~= SMFIR_CONTINUE then fail("big body chunk answered " .. tostring(r)) end
end
if not skipped then fail("body past the fingerprint's limit not answered SKIP") end
if sent < 1048576 or sent >= 1048576 + #chunk then fail("SKIP after " .. sent .. " bytes, not at the 1 MiB limit") end
if mt.eom(conn) ~= nil then fail("eom") end
r = mt.getreply(conn)
if r ~= SMFIR_ACCEPT then fail("big message not accepted: " .. tostring(r)) end

mt.disconnect(conn)
mt.echo("protocol: all checks passed")
end

-- miltertest reports a Lua error only through its exit code: say what failed
local ok, err = pcall(main)
if not ok then
  mt.echo("protocol: " .. tostring(err))
  error(err)
end
