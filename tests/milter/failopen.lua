-- failopen.lua -- miltertest script: the milter's ledger does not answer
-- (miltertest_test.sh points it at a Redis port where nothing listens).
-- Every message must be accepted, on both paths, never tempfailed.
local socket = os.getenv("RG_SOCKET")

local function main()
  local conn = mt.connect("unix:" .. socket, 40, 0.05)
  if conn == nil then error("FAIL: cannot connect") end
  if mt.conninfo(conn, "localhost", "127.0.0.1") ~= nil then error("FAIL: conninfo") end
  for i = 1, 3 do
    mt.macro(conn, SMFIC_MAIL, "i", "FO000000" .. i)
    if mt.mailfrom(conn, "<alice@example.org>") ~= nil then error("FAIL: mailfrom") end
    if mt.rcptto(conn, "<bob@defer.example>") ~= nil then error("FAIL: rcptto") end
    if mt.header(conn, "Message-ID", "<fo-" .. i .. "@client.example>") ~= nil then error("FAIL: header") end
    if mt.bodystring(conn, "body " .. i .. "\r\n") ~= nil then error("FAIL: body") end
    if mt.eom(conn) ~= nil then error("FAIL: eom") end
    if mt.getreply(conn) ~= SMFIR_ACCEPT then error("FAIL: message " .. i .. " not accepted: " .. tostring(mt.getreply(conn))) end
  end
  mt.disconnect(conn)
  mt.echo("failopen: all checks passed")
end

local ok, err = pcall(main)
if not ok then
  mt.echo("failopen: " .. tostring(err))
  error(err)
end
