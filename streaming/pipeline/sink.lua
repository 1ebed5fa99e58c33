-- Apply part of one micro-batch's row changes to one change-topic shard, exactly once.
--
-- A call holds all of the batch's changes for each (view, key) it names; a shard's changes
-- may take several calls, of which only the last (final = 1) records the batch id. A call
-- replayed after a crash emits nothing twice: an upsert of the stored value and a delete of
-- a missing row change nothing, so they append no delta.
--
-- KEYS[1] changes stream, KEYS[2] batches hash, KEYS[3] positions hash, KEYS[4] live hash,
-- then four keys per (view, key) group: rows hash, candidates hash, rank zset, the view's key
-- index in this shard (a sorted set of the keys that have rows; kept for listable views only).
-- ARGV: pipeline (with its namespace), batch id, retention, final (0 | 1), group count,
--       the pipeline's base name, its namespace,
--       then per group: view (with the namespace), key, limit (0 = all rows), listed (0 | 1),
--       op count,
--       then per op: kind ("u" upsert | "d" delete), row id, value JSON, score.
-- Returns the number of deltas appended.
--
-- A version of the pipeline that does not serve readers (being built, or just replaced) writes
-- its rows without deltas: nobody reads them yet, and readers of the serving version must not
-- pay for a rebuild. The shard's live hash names the serving namespace; it changes in the same
-- transaction as the version readers resolve (streaming/pipeline/versions.py), so a snapshot of the
-- new version is followed by every delta written after it. On a store cluster, where that is
-- three steps, its field '<pipeline>:next' names a version that publishes too meanwhile.
--
-- Each group's reads and writes are one variadic command per hash or sorted set, not one per
-- row: every command a script runs costs the store its own dispatch and its own entry in the
-- append-only file, whatever it carries.
local changes, batches, positions = KEYS[1], KEYS[2], KEYS[3]
local pipeline, batch, retention = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local final, groups = ARGV[4] == '1', tonumber(ARGV[5])
local live = redis.call('HMGET', KEYS[4], ARGV[6], ARGV[6] .. ':next')
local publish = (live[1] or '') == ARGV[7] or live[2] == ARGV[7]

local last = redis.call('HGET', batches, pipeline)
if last and tonumber(last) >= batch then
  return 0  -- this batch was applied before a crash; replaying it changes nothing
end

local function upsert(row, value)
  return '{"op":"upsert","row":' .. cjson.encode(row) .. ',"value":' .. value .. '}'
end
local function delete(row)
  return '{"op":"delete","row":' .. cjson.encode(row) .. '}'
end

-- Commands take at most this many arguments after the key: Lua's unpack is bounded. It is
-- even, so that pairs (field and value, score and member) are never split.
local STEP = 2000

-- One command per STEP arguments of `args` (a flat list), after `key`.
local function variadic(command, key, args)
  for i = 1, #args, STEP do
    redis.call(command, key, unpack(args, i, math.min(i + STEP - 1, #args)))
  end
end

-- The values of `fields` in hash `key`, by field (false for a missing one).
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, STEP do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + STEP - 1, #fields)))
    for j, value in ipairs(part) do
      out[fields[i + j - 1]] = value
    end
  end
  return out
end

local emitted, a, k = 0, 8, 5
local moved = {}  -- for the positions hash: view/key, entry id, ...
for _ = 1, groups do
  local view, key, limit = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  local listed, nops = ARGV[a + 3] == '1', tonumber(ARGV[a + 4])
  a = a + 5
  local rows, cand, rank, index = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  k = k + 4
  local ops = {}
  -- The group's rows in the order first changed, and the last change of each.
  local first, order, kind_of, value_of, score_of = a, {}, {}, {}, {}
  for _ = 1, nops do
    local row = ARGV[a + 1]
    if kind_of[row] == nil then
      order[#order + 1] = row
    end
    kind_of[row], value_of[row], score_of[row] = ARGV[a], ARGV[a + 2], ARGV[a + 3]
    a = a + 4
  end
  if limit == 0 then
    -- Each change is compared with the row as the changes before it left it, so the delta
    -- holds every change that changed something, in order; the hash gets the outcome.
    local stored = hmget(rows, order)
    local cur = {}
    for _, row in ipairs(order) do
      cur[row] = stored[row]
    end
    for i = first, a - 1, 4 do
      local kind, row, value = ARGV[i], ARGV[i + 1], ARGV[i + 2]
      if kind == 'd' then
        if cur[row] then
          cur[row] = false
          ops[#ops + 1] = delete(row)
        end
      elseif cur[row] ~= value then
        cur[row] = value
        ops[#ops + 1] = upsert(row, value)
      end
    end
    local set, gone = {}, {}
    for _, row in ipairs(order) do
      if cur[row] then
        if cur[row] ~= stored[row] then
          set[#set + 1] = row
          set[#set + 1] = cur[row]
        end
      elseif stored[row] then
        gone[#gone + 1] = row
      end
    end
    variadic('HSET', rows, set)
    variadic('HDEL', rows, gone)
  else
    local scored, valued, gone = {}, {}, {}
    for _, row in ipairs(order) do
      if kind_of[row] == 'd' then
        gone[#gone + 1] = row
      else
        scored[#scored + 1] = score_of[row]
        scored[#scored + 1] = row
        valued[#valued + 1] = row
        valued[#valued + 1] = value_of[row]
      end
    end
    -- A row whose score changes moves in the key's order even if its value stays: that is a
    -- change for a reader of a window of the key (docs/PROTOCOL.md, section 5.1).
    local had = {}
    if #valued > 0 then
      local upserted = {}
      for i = 1, #valued, 2 do
        upserted[#upserted + 1] = valued[i]
      end
      for i = 1, #upserted, STEP do
        local part = redis.call('ZMSCORE', rank, unpack(upserted, i, math.min(i + STEP - 1, #upserted)))
        for j, score in ipairs(part) do
          had[upserted[i + j - 1]] = score and tonumber(score)
        end
      end
    end
    -- Most changes of a top-rows view rewrite rows already ranked, at the score they keep
    -- (a rename rewrites the author's tweets in every follower's timeline): the key's order,
    -- and so its top rows, stay as they are, and only the changed rows that rank within the
    -- limit are compared. That spares reading the top rows twice, which cost most of such a
    -- call's time.
    local kept = #gone == 0 and #valued > 0
    for i = 1, #valued, 2 do
      kept = kept and had[valued[i]] == tonumber(score_of[valued[i]])
    end
    variadic('HSET', cand, valued)
    local compared, value, out = {}, value_of, {}
    if kept then
      for i = 1, #valued, 2 do
        if redis.call('ZREVRANK', rank, valued[i]) < limit then
          compared[#compared + 1] = valued[i]
        end
      end
    else
      local before = redis.call('ZREVRANGE', rank, 0, limit - 1)
      variadic('ZREM', rank, gone)
      variadic('HDEL', cand, gone)
      variadic('ZADD', rank, scored)
      local was = {}
      for _, row in ipairs(before) do
        was[row] = true
      end
      -- A row that stays in the top rows and that this call did not change is already in the
      -- view as it is among the candidates: only rows that enter or change are compared.
      local after, entering = {}, {}
      for _, row in ipairs(redis.call('ZREVRANGE', rank, 0, limit - 1)) do
        after[row] = true
        if kind_of[row] then
          compared[#compared + 1] = row
        elseif not was[row] then
          compared[#compared + 1] = row
          entering[#entering + 1] = row
        end
      end
      value = hmget(cand, entering)
      for _, row in ipairs(compared) do
        if kind_of[row] then
          value[row] = value_of[row]
        end
      end
      for _, row in ipairs(before) do
        if not after[row] then
          out[#out + 1] = row
        end
      end
    end
    local served = hmget(rows, compared)
    local set = {}
    for _, row in ipairs(compared) do
      local moved_rank = kind_of[row] and had[row] and had[row] ~= tonumber(score_of[row])
      if served[row] ~= value[row] or moved_rank then
        set[#set + 1] = row
        set[#set + 1] = value[row]
        ops[#ops + 1] = upsert(row, value[row])
      end
    end
    for _, row in ipairs(out) do
      ops[#ops + 1] = delete(row)
    end
    variadic('HSET', rows, set)
    variadic('HDEL', rows, out)
  end
  if listed and #ops > 0 then
    if redis.call('EXISTS', rows) == 1 then
      redis.call('ZADD', index, 0, key)
    else
      redis.call('ZREM', index, key)
    end
  end
  if #ops > 0 and publish then
    local id = redis.call('XADD', changes, 'MAXLEN', '~', retention, '*',
      'view', view, 'key', key, 'ops', '[' .. table.concat(ops, ',') .. ']',
      'pipeline', pipeline, 'batch', batch)
    moved[#moved + 1] = view .. '/' .. key
    moved[#moved + 1] = id
    emitted = emitted + 1
  end
end
variadic('HSET', positions, moved)
if final then
  redis.call('HSET', batches, pipeline, batch)
end
return emitted
