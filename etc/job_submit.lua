--[[
teiresias job_submit plugin (JobSubmitPlugins=lua; this file goes next to
slurm.conf as job_submit.lua; `teiresias cluster up --job-submit-lua FILE`
installs it on the local cluster).

Why: the teiresias controller, not Slurm's own scheduler, decides when and
where a job of a managed partition starts. Every such job is therefore held
at submission (priority 0, Reason=JobHeldUser, AdminComment=teiresias:held);
the controller releases it with a node list when the policy starts it. A job
submitted held (sbatch -H) stays the submitter's: not marked, never released
by the controller. Plain `sbatch` users are managed
too. Jobs of other partitions are untouched.

Keep MANAGED in step with `partitions:` in teiresias.yaml.
--]]

local MANAGED = { gpu = true }
-- A job submitted without -p lands in the default partition: is it managed?
local DEFAULT_PARTITION_MANAGED = true

local function is_managed(partition)
   if partition == nil or partition == "" then
      return DEFAULT_PARTITION_MANAGED
   end
   for p in string.gmatch(partition, "[^,]+") do
      if MANAGED[p] then
         return true
      end
   end
   return false
end

-- Only GPU jobs are scheduled by teiresias; CPU-only jobs are left to Slurm.
-- What a GPU job is must match the controller (slurm_plugin/backends/parse.py
-- gres_count): a positive GPU count in gpu, gpu:N or gpu:TYPE:N entries
-- ("gres:" / "gres/" prefixes allowed). gpu:0 asks for no GPU: a CPU job.
-- A count that is not a whole number (gpu:-1, gpu:abc, gpu:1.5) is refused:
-- Slurm would keep such a job pending forever. gpu:TYPE without a count is
-- refused too: it cannot be told from a mistyped count.

-- GPUs one tres_per_* string asks for, or nil and the offending entry.
local function gpu_count(spec)
   local total = 0
   for item in string.gmatch(spec, "[^,]+") do
      local s = string.gsub(item, "%b()", "")
      s = string.gsub(s, "^gres[:/]", "")
      s = string.gsub(s, "=", ":")
      local fields = {}
      for f in string.gmatch(s, "[^:]+") do
         fields[#fields + 1] = f
      end
      -- shard:N (a share of one GPU, docs/sjf-bsbf.md) is a GPU request too.
      if fields[1] == "gpu" or fields[1] == "shard" then
         if #fields == 1 then
            total = total + 1
         elseif #fields <= 3 and string.match(fields[#fields], "^%d+$") then
            total = total + tonumber(fields[#fields])
         else
            return nil, item
         end
      end
   end
   return total
end

-- GPUs asked for over all tres_per_* fields, or nil and the offending entry.
local function wanted_gpus(job_desc)
   local total = 0
   for _, field in ipairs({ "tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket" }) do
      local v = job_desc[field]
      if v ~= nil and v ~= "" then
         local n, bad = gpu_count(v)
         if n == nil then
            return nil, bad
         end
         total = total + n
      end
   end
   return total
end

-- The controller's word that a hold is its own (slurm_plugin/backends/base.py HOLD_MARK).
local HOLD_MARK = "teiresias:held"
-- Where an untyped shard request is kept (slurm_plugin/backends/gputypes.py SHARD_STASH).
local SHARD_STASH = "teiresias:shard="

-- Slurm 22.05 puts an untyped --gres=shard:N job on the lowest GPU index with N free
-- shards (first fit) and cannot give a pending job a GPU type later; a job that asks
-- no gres can be given one. So an untyped shard request is taken off the held job and
-- kept in its AdminComment; the controller releases it with the per-GPU type of the
-- GPU the plan chose (shard:g2:N), or untyped again on nodes without per-GPU types
-- (docs/gandiva.md "Which GPU a shard job gets"). Returns the count taken, or nil.
local function stash_shards(job_desc)
   local spec = job_desc.tres_per_node
   if spec == nil or spec == "" then
      return nil
   end
   local keep, taken = {}, nil
   for item in string.gmatch(spec, "[^,]+") do
      local s = string.gsub(item, "^gres[:/]", "")
      local count = string.match(s, "^shard:(%d+)$")
      if s == "shard" then
         count = "1"
      end
      if count ~= nil then
         taken = (taken or 0) + tonumber(count)
      else
         keep[#keep + 1] = item
      end
   end
   if taken ~= nil then
      job_desc.tres_per_node = table.concat(keep, ",")
   end
   return taken
end

-- GPU types some node has, read once from the slurm.conf beside this file (and the
-- files it Includes): NodeName=... Gres=gpu:TYPE:N. Slurm accepts a typed request
-- no node can give (--gres=gpu:a100:2 on untyped GPUs) and keeps it pending for
-- ever. nil when slurm.conf cannot be read: then no type is refused. slurmctld
-- reads this file again when it changes, not when slurm.conf does: touch it (or
-- restart slurmctld) after adding a GPU type.
local function read_gpu_types(path, types, depth)
   local f = io.open(path, "r")
   if f == nil then
      return depth > 0 and types or nil
   end
   local dir = string.match(path, "^(.*)/[^/]*$") or "."
   for line in f:lines() do
      local l = string.gsub(line, "#.*", "")
      local inc = string.match(l, "^%s*[Ii]nclude%s+(%S+)")
      if inc and depth < 4 then
         read_gpu_types(string.sub(inc, 1, 1) == "/" and inc or dir .. "/" .. inc, types, depth + 1)
      elseif string.match(l, "^%s*[Nn][Oo][Dd][Ee][Nn][Aa][Mm][Ee]=") then
         local gres = string.match(l, "[Gg][Rr][Ee][Ss]=(%S+)")
         for item in string.gmatch(gres or "", "[^,]+") do
            local name, typ = string.match(item, "^(%w+):([^:]+):")
            if name == "gpu" and not string.match(typ, "^%d+$") then
               types[typ] = true
            end
         end
      end
   end
   f:close()
   return types
end

local function gpu_types_here()
   local info = debug and debug.getinfo and debug.getinfo(1, "S")
   local dir = info and string.match(info.source or "", "^@(.*)/[^/]*$")
   if dir == nil then
      return nil
   end
   return read_gpu_types(dir .. "/slurm.conf", {}, 0)
end

local GPU_TYPES = gpu_types_here()

-- A typed GPU entry (gpu:TYPE:N) whose type no node has, or nil.
local function missing_gpu_type(job_desc)
   if GPU_TYPES == nil then
      return nil
   end
   for _, field in ipairs({ "tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket" }) do
      for item in string.gmatch(job_desc[field] or "", "[^,]+") do
         local s = string.gsub(string.gsub(item, "%b()", ""), "^gres[:/]", "")
         local name, typ = string.match(s, "^(%w+):([^:=]+)[:=]%d+$")
         if name == "gpu" and not GPU_TYPES[typ] then
            return typ
         end
      end
   end
   return nil
end

local function known_types()
   local names = {}
   for t in pairs(GPU_TYPES or {}) do
      names[#names + 1] = t
   end
   table.sort(names)
   return #names > 0 and table.concat(names, ", ") or "none, untyped GPUs only"
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if not is_managed(job_desc.partition) then
      return slurm.SUCCESS
   end
   local gpus, bad = wanted_gpus(job_desc)
   if gpus == nil then
      slurm.log_user("teiresias: GPU request '%s' has no whole GPU count; ask for --gpus=N, " ..
                     "--gres=gpu:N or --gres=gpu:TYPE:N with N >= 1", bad)
      return slurm.ERROR
   end
   if gpus == 0 then
      return slurm.SUCCESS
   end
   if job_desc.het_job_offset ~= nil and job_desc.het_job_offset ~= slurm.NO_VAL then
      -- One component of `sbatch A : B`: the controller starts jobs one by one, and
      -- Slurm cannot start a component alone (it used to wait for ever).
      slurm.log_user("teiresias: heterogeneous jobs are not scheduled on partition %s; " ..
                     "submit each component as a job of its own", tostring(job_desc.partition))
      return slurm.ERROR
   end
   local typ = missing_gpu_type(job_desc)
   if typ ~= nil then
      slurm.log_user("teiresias: no node has GPUs of type '%s' (types here: %s); " ..
                     "ask for --gres=gpu:N without a type, or one of those types", typ, known_types())
      return slurm.ERROR
   end
   if job_desc.priority == 0 then
      -- sbatch -H (or --priority=0 by an operator): the submitter's own hold.
      -- Left as it is and unmarked, so the controller never releases it.
      return slurm.SUCCESS
   end
   -- priority 0 = held; the mark tells the controller this hold is its own.
   job_desc.priority = 0
   local mark = HOLD_MARK
   local shards = stash_shards(job_desc)
   if shards ~= nil then
      mark = mark .. ";" .. SHARD_STASH .. tostring(shards)
   end
   if job_desc.admin_comment == nil or job_desc.admin_comment == "" then
      job_desc.admin_comment = mark
   else
      job_desc.admin_comment = job_desc.admin_comment .. ";" .. mark
   end
   slurm.log_info("teiresias: held job %s of uid %u for the controller",
                  tostring(job_desc.name), submit_uid)
   return slurm.SUCCESS
end

-- A person's hold that Slurm itself would not show the controller: the owner's
-- or an admin's `scontrol hold` on a job the controller holds (it is held
-- already: nothing changes, and an owner may not touch an admin hold), or on a
-- running job (which the controller requeues held, with its mark). The hold is
-- written into the job's comment instead, which its owner may change:
-- HOLD_ITEM<uid> (slurm_plugin/backends/base.py PERSON_HOLD), and the controller
-- never releases a job that carries it. The controller's own holds carry
-- HOLD_MARK in the same update, so they are never taken for a person's.
local HOLD_ITEM = "teiresias:hold="
local JOB_RUNNING, JOB_SUSPENDED = 1, 2 -- Slurm's job_states (base state: the low byte)

local function has_item(text, item)
   for x in string.gmatch(text or "", "[^;]+") do
      if x == item then
         return true
      end
   end
   return false
end

-- The comment without any HOLD_ITEM entry.
local function without_hold(comment)
   local kept = {}
   for x in string.gmatch(comment or "", "[^;]+") do
      if string.sub(x, 1, #HOLD_ITEM) ~= HOLD_ITEM then
         kept[#kept + 1] = x
      end
   end
   return table.concat(kept, ";")
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if not is_managed(job_rec.partition) then
      return slurm.SUCCESS
   end
   local marked = has_item(job_rec.admin_comment, HOLD_MARK)
   if job_desc.priority == 0 and not has_item(job_desc.admin_comment, HOLD_MARK) then
      local base = (job_rec.job_state or 0) % 256
      if marked or base == JOB_RUNNING or base == JOB_SUSPENDED then
         local rest = without_hold(job_rec.comment)
         job_desc.comment = (rest == "" and "" or rest .. ";") .. HOLD_ITEM .. tostring(modify_uid)
         slurm.log_info("teiresias: job %u held by uid %u; the controller keeps it held",
                        job_rec.job_id, modify_uid)
      end
   elseif job_desc.priority == slurm.INFINITE then
      -- A release lifts the person's hold. On a job the controller holds it lifts
      -- only that: the controller starts the job when its policy says. (A lua
      -- string cannot be set empty: a comment with nothing else keeps HOLD_ITEM
      -- alone, which holds nothing.)
      if string.find(job_rec.comment or "", HOLD_ITEM, 1, true) then
         local rest = without_hold(job_rec.comment)
         job_desc.comment = rest == "" and HOLD_ITEM or rest
      end
      if marked then
         job_desc.priority = slurm.NO_VAL
      end
   end
   return slurm.SUCCESS
end

slurm.log_info("teiresias: job_submit.lua loaded")
return slurm.SUCCESS
