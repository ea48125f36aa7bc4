"""Unit tests of snapd_trainer's failure check and framework callbacks.

Run by cmd/snapd/pytrainer_test.go (TestPythonTrainerUnit), which passes
SNAPD_PYTEST_OUT: the tests leave their state directories there
(OUT/hf, OUT/lightning) and Go checks the WAL requests with wal.List.
Standalone: python3 -m unittest discover -s python/tests
"""

import os
import sys
import tempfile
import threading
import types
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import snapd_trainer as st  # noqa: E402


def out_dir(name):
    base = os.environ.get("SNAPD_PYTEST_OUT") or tempfile.mkdtemp(prefix="snapd-pytest-")
    d = os.path.join(base, name)
    os.makedirs(d, exist_ok=True)
    return d


def request_positions(wal_dir):
    """(seg, off) of every request line, in log order."""
    out = []
    for name in sorted(os.listdir(wal_dir)):
        if not name.endswith(".wal"):
            continue
        off = 0
        with open(os.path.join(wal_dir, name), "rb") as f:
            for line in f:
                if line.startswith(b"snapreq/1 "):
                    out.append((int(name[:-4]), off))
                off += len(line)
    return out


def wal_lines(wal_dir):
    """Every request line, in log order."""
    out = []
    for name in sorted(os.listdir(wal_dir)):
        if name.endswith(".wal"):
            with open(os.path.join(wal_dir, name), "rb") as f:
                out += [line.decode() for line in f if line.startswith(b"snapreq/1 ")]
    return out


def add_outcome(wal_dir, gen, state, pos, msg="", src="/src"):
    body = "outcome gen=%d state=%s seg=%d off=%d ts=1 src=%s msg=%s" % (gen, state, pos[0], pos[1], st._escape(src), st._escape(msg) if msg else "")
    with open(os.path.join(wal_dir, "outcomes.log"), "ab") as f:
        f.write(body.encode() + b" crc=%08x\n" % st.crc32c(body.encode()))


class FailureCheck(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="snapd-fail-")
        self.wal = os.path.join(self.state, "wal")
        self.log = st.RequestLog(self.wal, requester="py:unit")

    def tearDown(self):
        self.log.close()

    def req(self, gen, on_failure="warn"):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            st.request_snapshot(gen, "/g/%d" % gen, log=self.log, on_failure=on_failure)
        return [str(x.message) for x in w if issubclass(x.category, st.SnapshotWarning)]

    def test_warn_raise_ignore(self):
        for g in (1, 2, 3):
            self.assertEqual(self.req(g), [])
        pos = request_positions(self.wal)
        self.assertEqual(len(pos), 3)
        # Another process's earlier request for gen 2 that failed: not ours.
        add_outcome(self.wal, 2, "failed", (pos[1][0], pos[1][1] - 1), msg="someone else's")
        add_outcome(self.wal, 1, "done", pos[0])
        add_outcome(self.wal, 2, "failed", pos[1], msg="unknown format: bad%magic")
        self.assertEqual(self.req(4), ["snapd: generation 2 failed: unknown format: bad%magic"])
        self.assertEqual(self.req(5), [], "warned twice")
        # A torn (unterminated) outcome is not read until complete.
        with open(os.path.join(self.wal, "outcomes.log"), "ab") as f:
            f.write(b"outcome gen=3 state=fai")
        self.assertEqual(self.req(6), [])
        with open(os.path.join(self.wal, "outcomes.log"), "rb+") as f:
            data = f.read()
            f.seek(0)
            f.truncate()
            f.write(data[: data.rindex(b"\n") + 1])
        add_outcome(self.wal, 3, "failed", pos[2], msg="boom")
        n = len(request_positions(self.wal))
        with self.assertRaises(st.SnapshotFailed) as cm:
            self.req(7, on_failure="raise")
        self.assertEqual((cm.exception.gen, cm.exception.reason), (3, "boom"))
        self.assertEqual(len(request_positions(self.wal)), n, "raise appended the request")
        self.assertEqual(self.req(7, on_failure="raise"), [])  # reported once: now requested
        self.assertEqual(len(request_positions(self.wal)), n + 1)
        # A corrupt line (bad CRC) is skipped.
        pos = request_positions(self.wal)
        with open(os.path.join(self.wal, "outcomes.log"), "ab") as f:
            f.write(b"outcome gen=4 state=failed seg=%d off=%d ts=1 src=/g msg=x crc=00000000\n" % pos[3])
        self.assertEqual(self.req(8), [])
        # ignore: no check, nothing reported; warn then reports it.
        add_outcome(self.wal, 5, "failed", pos[4], msg="five")
        self.assertEqual(self.req(9, on_failure="ignore"), [])
        self.assertEqual(self.req(10), ["snapd: generation 5 failed: five"])
        # A failed generation requested again and done: no longer failed.
        add_outcome(self.wal, 6, "failed", pos[5], msg="six")
        self.req(6, on_failure="ignore")
        add_outcome(self.wal, 6, "done", request_positions(self.wal)[-1])
        self.assertEqual(self.req(11), [])
        # Only earlier generations count.
        add_outcome(self.wal, 11, "failed", request_positions(self.wal)[-1], msg="later")
        self.assertEqual(self.req(2, on_failure="ignore"), [])
        self.assertEqual(self.req(3), [])
        with self.assertRaises(ValueError):
            st.request_snapshot(12, "/g", log=self.log, on_failure="explode")

    def test_without_log(self):
        # request_snapshot without a RequestLog shares the process's record.
        st.request_snapshot(1, "/g/1", state_dir=self.state)
        add_outcome(self.wal, 1, "failed", request_positions(self.wal)[0], msg="no")
        with self.assertRaises(st.SnapshotFailed):
            st.request_snapshot(2, "/g/2", state_dir=self.state, on_failure="raise")

    def test_missing_binary(self):
        old = os.environ.pop("SNAPD_BIN", None)
        try:
            with self.assertRaises(st.SnapdNotFound) as cm:
                st.status(1, state_dir=self.state, snapd="/nonexistent/snapd")
            self.assertIn("$SNAPD_BIN", str(cm.exception))
            os.environ["SNAPD_BIN"] = "/nonexistent/snapd2"
            with self.assertRaises(FileNotFoundError) as cm:
                st.generations(self.state)
            self.assertIn("/nonexistent/snapd2", str(cm.exception))
        finally:
            os.environ.pop("SNAPD_BIN", None)
            if old is not None:
                os.environ["SNAPD_BIN"] = old


class HuggingFace(unittest.TestCase):
    """SnapdTrainerCallback driven as transformers' CallbackHandler.call_event does."""

    def test_on_save(self):
        root = out_dir("hf")
        state_dir = os.path.join(root, "state")
        args = types.SimpleNamespace(output_dir=os.path.join(root, "out"))
        cb = st.SnapdTrainerCallback(state_dir, requester="py:hf")
        try:
            import transformers
            self.assertIsInstance(cb, transformers.TrainerCallback)
        except ImportError:
            pass
        callbacks = [cb]

        def call_event(event, state, control, **kwargs):
            for c in callbacks:
                result = getattr(c, event)(args, state, control, model=object(), processing_class=None, optimizer=None,
                                           lr_scheduler=None, train_dataloader=None, eval_dataloader=None, **kwargs)
                if result is not None:
                    control = result
            return control

        control = types.SimpleNamespace(should_save=True)
        for step in (10, 20):
            ck = os.path.join(args.output_dir, "checkpoint-%d" % step)
            os.makedirs(ck)
            with open(os.path.join(ck, "model.safetensors"), "wb") as f:
                f.write(b"x")
            # log_history as the Trainer keeps it: training logs and an
            # evaluation, each with its own step and epoch.
            history = [{"loss": 0.9, "learning_rate": 1e-3, "grad_norm": 2.0, "epoch": 0.5, "step": step - 5},
                       {"loss": 1.0 / step, "learning_rate": 1e-4, "epoch": step / 10.0, "step": step},
                       {"eval_loss": 0.5, "eval_runtime": 1.25, "epoch": step / 10.0, "step": step}]
            state = types.SimpleNamespace(global_step=step, epoch=step / 10.0, log_history=history, is_world_process_zero=True)
            self.assertIs(call_event("on_save", state, control), control)
            self.assertEqual(cb.requested_meta[step], {"step": step, "epoch": step / 10.0, "loss": 1.0 / step, "learning_rate": 1e-4,
                                                       "grad_norm": 2.0, "eval_loss": 0.5, "eval_runtime": 1.25})
        # Another rank: nothing. A step without its directory: a warning.
        call_event("on_save", types.SimpleNamespace(global_step=30, is_world_process_zero=False), control)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            call_event("on_save", types.SimpleNamespace(global_step=40, is_world_process_zero=True), control)
        self.assertTrue(any("checkpoint-40" in str(x.message) for x in w), [str(x.message) for x in w])
        call_event("on_train_end", types.SimpleNamespace(global_step=40, is_world_process_zero=True), control)
        self.assertEqual(cb.requested, [(10, os.path.join(args.output_dir, "checkpoint-10")),
                                        (20, os.path.join(args.output_dir, "checkpoint-20"))])
        self.assertIsNone(cb.resumed_from)

    def test_resume(self):
        # train(resume_from_checkpoint=checkpoint-10): the Trainer restores
        # global_step 10 before on_train_begin. snapd has generation 10
        # (done): the first save after it declares resumed_from=10. A
        # second resume at a step snapd never had declares nothing.
        root = out_dir("hf-resume")
        state_dir = os.path.join(root, "state")
        wal = os.path.join(state_dir, "wal")
        args = types.SimpleNamespace(output_dir=os.path.join(root, "out"))
        first = st.SnapdTrainerCallback(state_dir, requester="py:hf")
        control = types.SimpleNamespace()

        def save(cb, step):
            ck = os.path.join(args.output_dir, "checkpoint-%d" % step)
            os.makedirs(ck, exist_ok=True)
            cb.on_save(args, types.SimpleNamespace(global_step=step, is_world_process_zero=True), control)

        first.on_train_begin(args, types.SimpleNamespace(global_step=0, is_world_process_zero=True), control)
        for step in (10, 20):
            save(first, step)
        first.on_train_end(args, None, control)
        pos = request_positions(wal)
        add_outcome(wal, 10, "done", pos[0])
        add_outcome(wal, 20, "done", pos[1])
        self.assertIsNone(first.resumed_from)
        resumed = st.SnapdTrainerCallback(state_dir, requester="py:hf")
        resumed.on_train_begin(args, types.SimpleNamespace(global_step=10, is_world_process_zero=True), control)
        save(resumed, 20)
        save(resumed, 30)
        resumed.on_train_end(args, None, control)
        self.assertEqual(resumed.resumed_from, 10)
        lines = wal_lines(wal)
        self.assertIn(" gen=20 ", lines[2])
        self.assertIn(" resumed_from=10 ", lines[2])
        self.assertNotIn("resumed_from", lines[3])
        again = st.SnapdTrainerCallback(state_dir, requester="py:hf")
        again.on_train_begin(args, types.SimpleNamespace(global_step=30, is_world_process_zero=True), control)
        save(again, 40)
        again.on_train_end(args, None, control)
        self.assertIsNone(again.resumed_from)  # 30 is not done: an ordinary request
        self.assertNotIn("resumed_from", wal_lines(wal)[4])


class Replace(unittest.TestCase):
    """publish_generation(replace=True) and replace_published: a resumed
    run re-publishes a number only when snapd is done with it."""

    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="snapd-replace-")
        self.gens = os.path.join(self.state, "gens")
        self.wal = os.path.join(self.state, "wal")
        self.log = st.RequestLog(self.wal, requester="py:unit")

    def tearDown(self):
        self.log.close()

    def publish(self, gen, data, **kw):
        kw.setdefault("replace_wait", 0)
        return st.publish_generation(self.gens, gen, data, suffix=".bin", **kw)

    def test_replace(self):
        p = self.publish(3, b"first")
        with self.assertRaises(FileExistsError) as cm:
            self.publish(3, b"again")
        self.assertIn("replace=True", str(cm.exception))
        # Not requested yet, then requested and not handled: kept.
        with self.assertRaises(FileExistsError) as cm:
            self.publish(3, b"again", replace=True)
        self.assertIn("never requested", str(cm.exception))
        st.request_snapshot(3, p, log=self.log)
        with self.assertRaises(FileExistsError) as cm:
            self.publish(3, b"again", replace=True)
        self.assertIn("not handled yet", str(cm.exception))
        # Failed (never recorded): replaceable; then requested again and
        # done: replaceable too, unless a pin names it.
        add_outcome(self.wal, 3, "failed", request_positions(self.wal)[-1], msg="x")
        self.assertEqual(self.publish(3, b"after a failure", replace=True), p)
        st.request_snapshot(3, p, log=self.log, on_failure="ignore")
        add_outcome(self.wal, 3, "done", request_positions(self.wal)[-1])
        os.makedirs(os.path.join(self.gens, ".pins"))
        pin = os.path.join(self.gens, ".pins", "000003.4242.abcd.pin")
        with open(pin, "w") as f:
            f.write("pin gen=3 pid=4242 start=1 boot=b host=h ts=1\n")
        with self.assertRaises(FileExistsError) as cm:
            self.publish(3, b"again", replace=True)
        self.assertIn("pinned", str(cm.exception))
        with open(p, "rb") as f:
            self.assertEqual(f.read(), b"after a failure")
        os.remove(pin)
        self.assertEqual(self.publish(3, b"second", replace=True), p)
        with open(p, "rb") as f:
            self.assertEqual(f.read(), b"second")
        self.assertEqual(sorted(os.listdir(self.gens)), [".lock", ".pins", "gen-000003.bin"])
        # A newer request for the new file: not handled, so not replaced.
        st.request_snapshot(3, p, log=self.log, on_failure="ignore")
        with self.assertRaises(FileExistsError):
            self.publish(3, b"third", replace=True)
        # A directory generation, and nothing published: replace is a no-op.
        st.replace_published(self.gens, 9)
        d = st.publish_generation_dir(self.gens, 4, lambda d: open(os.path.join(d, "a"), "w").close())
        st.request_snapshot(4, d, log=self.log, on_failure="ignore")
        add_outcome(self.wal, 4, "done", request_positions(self.wal)[-1])
        st.publish_generation_dir(self.gens, 4, lambda d: open(os.path.join(d, "b"), "w").close(), replace=True)
        self.assertEqual(os.listdir(d), ["b"])

    def test_replace_waits(self):
        # The daemon handles the crashed run's request while the resumed
        # run waits: the replace goes through once the outcome is there.
        p = self.publish(5, b"crashed run")
        st.request_snapshot(5, p, log=self.log)
        pos = request_positions(self.wal)[-1]
        t = threading.Timer(0.5, lambda: add_outcome(self.wal, 5, "done", pos))
        t.start()
        try:
            self.assertEqual(self.publish(5, b"resumed run", replace=True, replace_wait=300), p)
        finally:
            t.cancel()
        with open(p, "rb") as f:
            self.assertEqual(f.read(), b"resumed run")


class AutoMeta(unittest.TestCase):
    def test_limits(self):
        m = st.auto_meta({"step": 3, "val/loss": 0.25, "bad key!": 1, "nan": float("nan"), "hist": [1, 2], "s": "x" * 300},
                         {"run": "a", "step": 4})
        self.assertEqual(m, {"step": 4, "val.loss": 0.25, "run": "a"})
        many = st.auto_meta({"k%03d" % i: "v" * 40 for i in range(100)})
        self.assertLessEqual(len(st.encode_meta(many)), st.MAX_META_SIZE)
        self.assertIn("k000", many)

    def test_callable_and_off(self):
        state = types.SimpleNamespace(global_step=7, epoch=1.0, log_history=[{"loss": 0.5, "step": 7}], is_world_process_zero=True)
        root = out_dir("hf-meta")
        args = types.SimpleNamespace(output_dir=os.path.join(root, "out"))
        os.makedirs(os.path.join(args.output_dir, "checkpoint-7"))
        cb = st.SnapdTrainerCallback(os.path.join(root, "state"), meta=lambda a, s: {"lr_schedule": "cosine", "loss": 0.4})
        cb.on_save(args, state, None)
        self.assertEqual(cb.requested_meta[7], {"step": 7, "epoch": 1.0, "loss": 0.4, "lr_schedule": "cosine"})
        off = st.SnapdTrainerCallback(os.path.join(root, "state-off"), meta=False)
        off.on_save(args, state, None)
        self.assertEqual(off.requested_meta[7], {})
        cb.close()
        off.close()
        with self.assertRaises(ValueError):
            st.SnapdTrainerCallback(root, meta={"a": 1})


class LibraryBases(unittest.TestCase):
    """With the library importable, a callback is an instance of its base class."""

    def test_subclasses(self):
        saved_bases, saved_mods = dict(st._bases), {k: sys.modules.get(k) for k in ("transformers", "lightning.pytorch")}
        try:
            st._bases.clear()
            hf = types.ModuleType("transformers")

            class TrainerCallback:
                def on_save(self, args, state, control, **kwargs):
                    raise AssertionError("base on_save called")

            hf.TrainerCallback = TrainerCallback
            lp = types.ModuleType("lightning.pytorch")

            class Callback:
                @property
                def state_key(self):
                    return self.__class__.__qualname__

            lp.Callback = Callback
            sys.modules["transformers"], sys.modules["lightning.pytorch"] = hf, lp
            a = st.SnapdTrainerCallback(tempfile.mkdtemp(), requester="py:a")
            self.assertIsInstance(a, TrainerCallback)
            self.assertIsInstance(a, st.SnapdTrainerCallback)
            self.assertEqual((a.requester, type(a).__name__), ("py:a", "SnapdTrainerCallback"))
            self.assertIs(type(st.SnapdTrainerCallback(".")), type(a))
            b = st.SnapdLightningCallback(on_failure="raise")
            self.assertIsInstance(b, Callback)
            self.assertEqual((b.on_failure, b.state_key), ("raise", "SnapdLightningCallback"))
            args = types.SimpleNamespace(output_dir=tempfile.mkdtemp())
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                a.on_save(args, types.SimpleNamespace(global_step=1), None)  # ours, not the base's
        finally:
            st._bases.clear()
            st._bases.update(saved_bases)
            for k, v in saved_mods.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v


class FakeModelCheckpoint:
    """The attributes of Lightning's ModelCheckpoint the callback reads."""

    def __init__(self, dirpath, private=True):
        self.dirpath = dirpath
        self.last_model_path = ""
        self.best_model_path = ""
        if private:
            self._last_checkpoint_saved = None


class FakeTrainer:
    def __init__(self, callbacks, mc):
        self.callbacks = callbacks
        self.checkpoint_callbacks = [mc]
        self.checkpoint_callback = mc
        self.global_step = 0
        self.current_epoch = 0
        self.callback_metrics = {}
        self.is_global_zero = True
        self.module = object()

    def save_checkpoint(self, filepath, size):
        # Lightning: dump_checkpoint calls every callback's
        # on_save_checkpoint(trainer, pl_module, checkpoint), then the
        # strategy writes the file.
        checkpoint = {"global_step": self.global_step, "state_dict": {}}
        for c in self.callbacks:
            c.on_save_checkpoint(self, self.module, checkpoint)
        with open(filepath, "wb") as f:
            f.write(b"c" * size)

    def model_checkpoint_save(self, mc, name, size, link_last=False, topk=True):
        """ModelCheckpoint._save_topk_checkpoint then _save_last_checkpoint."""
        path = os.path.join(mc.dirpath, name)
        if topk:
            self.save_checkpoint(path, size)
            if hasattr(mc, "_last_checkpoint_saved"):
                mc._last_checkpoint_saved = path
            mc.best_model_path = path
        last = os.path.join(mc.dirpath, "last.ckpt")
        if link_last:
            if os.path.lexists(last):
                os.remove(last)
            os.symlink(path, last)
        else:
            self.save_checkpoint(last, size + 1)
            if hasattr(mc, "_last_checkpoint_saved"):
                mc._last_checkpoint_saved = last
        mc.last_model_path = last

    def batch_end(self):
        for c in self.callbacks:
            c.on_train_batch_end(self, self.module, {"loss": 0.0}, ("x", "y"), 0)


class Lightning(unittest.TestCase):
    def run_loop(self, name, private, link_last, topk=True):
        root = out_dir(os.path.join("lightning", name))
        ckdir = os.path.join(root, "checkpoints")
        os.makedirs(ckdir)
        mc = FakeModelCheckpoint(ckdir, private=private)
        cb = st.SnapdLightningCallback(os.path.join(root, "state"), requester="py:lightning")
        try:
            import lightning.pytorch as lp
            self.assertIsInstance(cb, lp.Callback)
        except ImportError:
            pass
        tr = FakeTrainer([cb, mc], mc)
        mc.on_save_checkpoint = lambda *a: None
        mc.on_train_batch_end = lambda *a: None
        for step, size in ((5, 100), (10, 200)):
            tr.global_step = step
            tr.callback_metrics = {"train_loss": 1.0 / step, "val/loss": 2.0 / step, "hist": [1, 2]}
            tr.batch_end()
            tr.model_checkpoint_save(mc, "epoch=0-step=%d.ckpt" % step, size, link_last, topk)
        tr.batch_end()
        tr.global_step = 15
        tr.model_checkpoint_save(mc, "epoch=1-step=15.ckpt", 300, link_last, topk)
        # A save to a path of the user's: no callback file changes.
        tr.global_step = 16
        tr.save_checkpoint(os.path.join(root, "mine.ckpt"), 10)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            cb.teardown(tr, tr.module, stage="fit")
        self.assertTrue(any("step 16" in str(x.message) for x in w), [str(x.message) for x in w])
        return cb, ckdir

    def test_model_checkpoint(self):
        cb, ckdir = self.run_loop("private", True, False)
        r = os.path.realpath
        self.assertEqual(cb.requested, [(5, r(os.path.join(ckdir, "epoch=0-step=5.ckpt"))),
                                        (10, r(os.path.join(ckdir, "epoch=0-step=10.ckpt"))),
                                        (15, r(os.path.join(ckdir, "epoch=1-step=15.ckpt")))])
        # The metrics of each save (read at on_save_checkpoint, not when
        # a later hook found the file); the list is not a scalar.
        self.assertEqual(cb.requested_meta[5], {"step": 5, "epoch": 0, "train_loss": 0.2, "val.loss": 0.4})
        self.assertEqual(cb.requested_meta[10], {"step": 10, "epoch": 0, "train_loss": 0.1, "val.loss": 0.2})

    def test_public_attributes_only(self):
        # Without _last_checkpoint_saved (older Lightning): best_model_path.
        cb, ckdir = self.run_loop("public", False, False)
        r = os.path.realpath
        self.assertEqual(cb.requested, [(5, r(os.path.join(ckdir, "epoch=0-step=5.ckpt"))),
                                        (10, r(os.path.join(ckdir, "epoch=0-step=10.ckpt"))),
                                        (15, r(os.path.join(ckdir, "epoch=1-step=15.ckpt")))])

    def test_last_only(self):
        # save_top_k=0, save_last=True: last.ckpt, rewritten by each save.
        cb, ckdir = self.run_loop("lastonly", False, False, topk=False)
        last = os.path.realpath(os.path.join(ckdir, "last.ckpt"))
        self.assertEqual(cb.requested, [(5, last), (10, last), (15, last)])

    def test_linked_last(self):
        cb, ckdir = self.run_loop("linked", False, True)
        r = os.path.realpath
        self.assertEqual(cb.requested, [(5, r(os.path.join(ckdir, "epoch=0-step=5.ckpt"))),
                                        (10, r(os.path.join(ckdir, "epoch=0-step=10.ckpt"))),
                                        (15, r(os.path.join(ckdir, "epoch=1-step=15.ckpt")))])

    def test_resume(self):
        # fit(ckpt_path=...) restores global_step before on_train_start.
        root = out_dir(os.path.join("lightning", "resume"))
        ckdir = os.path.join(root, "checkpoints")
        os.makedirs(ckdir)
        wal = os.path.join(root, "state", "wal")
        mc = FakeModelCheckpoint(ckdir)
        first = st.SnapdLightningCallback(os.path.join(root, "state"), requester="py:lightning")
        tr = FakeTrainer([first, mc], mc)
        mc.on_save_checkpoint = lambda *a: None
        mc.on_train_batch_end = lambda *a: None
        first.on_train_start(tr, tr.module)
        for step in (5, 10):
            tr.global_step = step
            tr.model_checkpoint_save(mc, "step=%d.ckpt" % step, 10 + step)
            tr.batch_end()
        first.teardown(tr, tr.module, stage="fit")
        for i, p in enumerate(request_positions(wal)):
            add_outcome(wal, (5, 10)[i], "done", p)
        resumed = st.SnapdLightningCallback(os.path.join(root, "state"), requester="py:lightning")
        tr = FakeTrainer([resumed, mc], mc)
        tr.global_step = 5
        resumed.on_train_start(tr, tr.module)
        tr.global_step = 10
        tr.model_checkpoint_save(mc, "step=10-v1.ckpt", 99)
        tr.batch_end()
        resumed.teardown(tr, tr.module, stage="fit")
        self.assertEqual(resumed.resumed_from, 5)
        self.assertIn(" resumed_from=5 ", wal_lines(wal)[2])

    def test_other_ranks(self):
        root = out_dir("lightning-rank1")
        mc = FakeModelCheckpoint(root)
        cb = st.SnapdLightningCallback(os.path.join(root, "state"))
        tr = FakeTrainer([cb], mc)
        tr.is_global_zero = False
        tr.global_step = 3
        tr.model_checkpoint_save(mc, "a.ckpt", 5)
        tr.batch_end()
        cb.teardown(tr, tr.module, "fit")
        self.assertEqual(cb.requested, [])


if __name__ == "__main__":
    unittest.main()
