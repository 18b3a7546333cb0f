-- settings.lua -- miltertest script: the milter's settings take effect.
-- Run by miltertest_test.sh against a milter started with
--   milter.reject_code=450, milter.reject_xcode=4.7.1,
--   reinjection.fingerprint.parts=[sender, body],
--   reinjection.fingerprint.body_limit=2KiB, milter.timeout=1s,
--   milter.filter_rescan=0s (every lookup reaches the ledger),
--   errors.bad_input=tempfail.
-- Environment: RG_SOCKET, RG_LEDGER, RG_FEED, RG_LOG (as protocol.lua).

local socket = os.getenv("RG_SOCKET")
local ledger = os.getenv("RG_LEDGER")
local feed = os.getenv("RG_FEED")
local plog = os.getenv("RG_LOG")

local function fail(msg)
  error("FAIL: " .. msg)
end

local function main()
-- a new connection for each step: the milter closes one idle for milter.timeout
local function connect()
  local conn = mt.connect("unix:" .. socket, 40, 0.05)
  if conn == nil then fail("cannot connect to " .. socket) end
  if mt.conninfo(conn, "localhost", "127.0.0.1") ~= nil then fail("conninfo") end
  if mt.getreply(conn) ~= SMFIR_CONTINUE then fail("connect not continued") end
  return conn
end

-- one message, its body in chunks of `chunk` bytes; returns the reply at end
-- of message and the bytes sent when the milter first answered SKIP (or nil)
local function message(conn, qid, rcpt, msgid, subject, body, chunk)
  mt.macro(conn, SMFIC_MAIL, "i", qid)
  if mt.mailfrom(conn, "<alice@example.org>") ~= nil then fail("mailfrom") end
  mt.macro(conn, SMFIC_RCPT, "i", qid)
  if mt.rcptto(conn, "<" .. rcpt .. ">") ~= nil then fail("rcptto") end
  if mt.header(conn, "From", "<alice@example.org>") ~= nil then fail("header") end
  if mt.header(conn, "Subject", subject) ~= nil then fail("header") end
  if mt.header(conn, "Message-ID", msgid) ~= nil then fail("header") end
  local sent, skipped_at = 0, nil
  while sent < #body do
    local piece = string.sub(body, sent + 1, sent + chunk)
    if mt.bodystring(conn, piece) ~= nil then fail("body") end
    sent = sent + #piece
    local r = mt.getreply(conn)
    if r == SMFIR_SKIP then
      skipped_at = sent
      break
    end
    if r ~= SMFIR_CONTINUE then fail("body chunk answered " .. tostring(r)) end
  end
  if mt.eom(conn) ~= nil then fail("eom") end
  return mt.getreply(conn), skipped_at
end

-- the same first 2400 bytes, different endings
local head = string.rep("0123456789 figures of the quarter\r\n", 70)
local original = head .. "Regards, Alice\r\n"
local resend = head .. "Regards again, Alice (second try)\r\n"

-- the original: accepted; its body is read up to the 2 KiB body_limit, then
-- the milter answers SKIP (to the chunk of 1000 bytes that reaches it)
local conn = connect()
local r, skipped_at = message(conn, "DDD0000001", "bob@parts.example", "<parts-1@client.example>",
  "Quarterly figures", original, 1000)
if r ~= SMFIR_ACCEPT then fail("original not accepted: " .. tostring(r)) end
if skipped_at == nil or skipped_at < 2048 or skipped_at >= 2048 + 1000 then
  fail("body not skipped at the chunk that reaches 2 KiB: skipped at " .. tostring(skipped_at))
end
mt.disconnect(conn)

-- the sending Postfix defers it
os.execute("sleep 0.5")
local f = io.open(plog, "w")
f:write(os.date("%b %e %H:%M:%S") .. " sender postfix/smtp[4242]: DDD0000001: to=<bob@parts.example>, " ..
  "relay=mx.parts.example[192.0.2.1]:25, delay=1.2, delays=0.1/0/0.6/0.5, dsn=4.3.5, status=deferred " ..
  "(host mx.parts.example[192.0.2.1] said: 451 4.3.5 System config error (in reply to RCPT TO command))\n")
f:close()
if not os.execute(feed .. " " .. ledger .. " " .. plog) then fail("ledger feed failed") end

-- a resend under a new Message-ID and another subject, its body differing
-- only past body_limit: the fingerprint (sender and the first 2 KiB of the
-- body) is the original's, so it is refused, with milter.reject_code and
-- reject_xcode (checked in the verdict line by miltertest_test.sh)
conn = connect()
r = message(conn, "EEE0000001", "bob@parts.example", "<parts-2@client.example>",
  "Fwd: Quarterly figures (please read)", resend, 4096)
if r ~= SMFIR_REPLYCODE then fail("resend with another subject not refused: " .. tostring(r)) end

-- other content from the same sender is not a resend
r = message(conn, "EEE0000002", "bob@parts.example", "<parts-3@client.example>",
  "Quarterly figures", "Other words entirely.\r\n", 4096)
if r ~= SMFIR_ACCEPT then fail("other content not accepted: " .. tostring(r)) end
mt.disconnect(conn)

-- errors.bad_input=tempfail: a message past the milter's input limits (more
-- than 1000 headers) is not looked up; over SMTP it is tempfailed instead of
-- accepted unchecked (checked in the log and counters by miltertest_test.sh)
conn = connect()
mt.macro(conn, SMFIC_MAIL, "i", "GGG0000001")
if mt.mailfrom(conn, "<alice@example.org>") ~= nil then fail("mailfrom") end
mt.macro(conn, SMFIC_RCPT, "i", "GGG0000001")
if mt.rcptto(conn, "<bob@parts.example>") ~= nil then fail("rcptto") end
for i = 1, 1001 do
  if mt.header(conn, "X-Trace-" .. i, "hop " .. i) ~= nil then fail("header " .. i) end
end
if mt.bodystring(conn, "short\r\n") ~= nil then fail("body") end
if mt.eom(conn) ~= nil then fail("eom") end
r = mt.getreply(conn)
if r ~= SMFIR_TEMPFAIL and r ~= SMFIR_REPLYCODE then fail("over-limit message not tempfailed: " .. tostring(r)) end
mt.disconnect(conn)
mt.echo("settings: all checks passed")
end

local ok, err = pcall(main)
if not ok then
  mt.echo("settings: " .. tostring(err))
  error(err)
end
