-- lock.lua -- miltertest script: the ledger's write lock is held by another
-- process (miltertest_test.sh), so the milter's record writer waits. Run
-- against the milter of settings.lua, with milter.deadline=3s and
-- milter.record_queue=1. Environment: RG_SOCKET.
local socket = os.getenv("RG_SOCKET")

local function fail(msg)
  error("FAIL: " .. msg)
end

local function message(conn, qid, msgid)
  mt.macro(conn, SMFIC_MAIL, "i", qid)
  if mt.mailfrom(conn, "<alice@example.org>") ~= nil then fail("mailfrom") end
  mt.macro(conn, SMFIC_RCPT, "i", qid)
  if mt.rcptto(conn, "<erin@lock.example>") ~= nil then fail("rcptto") end
  if mt.header(conn, "Message-ID", msgid) ~= nil then fail("header") end
  if mt.bodystring(conn, "Sent while the ledger is busy: " .. qid .. "\r\n") ~= nil then fail("body") end
  if mt.eom(conn) ~= nil then fail("eom") end
  return mt.getreply(conn)
end

local function main()
  local conn = mt.connect("unix:" .. socket, 40, 0.05)
  if conn == nil then fail("cannot connect to " .. socket) end
  if mt.conninfo(conn, "localhost", "127.0.0.1") ~= nil then fail("conninfo") end
  -- FFF0000001 is accepted and queued for the writer, which takes it and waits
  -- for the lock. Its resend FFF0000002 follows at once: the lookup waits for
  -- that record (1 s at most), and then, within milter.deadline (3 s), asks the
  -- ledger, which has no pending copy yet: accepted, not failed open (the
  -- default 500 ms deadline would have passed). Its record fills the queue of
  -- one; the records of FFF0000003 and FFF0000004 find it full and are dropped.
  for i, id in ipairs({ "<busy-1@client.example>", "<busy-1@client.example>", "<busy-3@client.example>",
      "<busy-4@client.example>" }) do
    local r = message(conn, "FFF000000" .. i, id)
    if r ~= SMFIR_ACCEPT then fail("FFF000000" .. i .. " not accepted: " .. tostring(r)) end
  end
  mt.disconnect(conn)
  mt.echo("lock: all checks passed")
end

local ok, err = pcall(main)
if not ok then
  mt.echo("lock: " .. tostring(err))
  error(err)
end
