"""PERSON and ADDRESS recall on text the detector was not written for: names and
addresses from a general fake-data generator (Faker, en_US and zh_CN), set into plain
English and Chinese sentences and log lines with no cue words, beside hard negatives
(months, words that are also names, cities and provinces alone, products).

Two splits with their own seeds and their own sentence templates: `tune` is the one the
detector's rules were checked against; `held_out` is only measured.
"""

from __future__ import annotations

import random

from kfp_llmops.components.data_validation import pii
from tests.pii_corpus import Sample

EN_PERSON, EN_ADDRESS, ZH_PERSON, ZH_ADDRESS = "en_person", "en_address", "zh_person", "zh_address"
KINDS = (EN_PERSON, EN_ADDRESS, ZH_PERSON, ZH_ADDRESS)
TYPE_OF = {EN_PERSON: pii.PERSON, ZH_PERSON: pii.PERSON, EN_ADDRESS: pii.ADDRESS, ZH_ADDRESS: pii.ADDRESS}

TEMPLATES = {
    "tune": {
        EN_PERSON: [
            "{v} reviewed the pull request on Monday.",
            "The badge for {v} was printed twice.",
            "2026-03-01T10:22:01Z INFO owner={v} job=nightly status=ok",
            "Minutes were taken by {v} and shared later.",
            "We owe {v} a reply about the invoice.",
        ],
        EN_ADDRESS: [
            "The parcel went to {v} yesterday.",
            "2026-03-01 WARN geocode failed for '{v}'",
            "Their office moved to {v} in spring.",
            "Deliveries for {v} arrive before noon.",
        ],
        ZH_PERSON: [
            "Please ask {v} about the schedule.",
            "ticket closed by {v}.",
            "客户信息：{v}，已回访。",
            "2026-03-01 INFO user={v} action=login",
            "Thanks to {v} for the fix.",
        ],
        ZH_ADDRESS: ["收货地址 {v}", "The warehouse is at {v} now.", "log: addr={v} verified", "新办公室：{v}。"],
    },
    "held_out": {
        EN_PERSON: [
            "Yesterday {v} closed the ticket.",
            'audit: actor="{v}" role=admin',
            "The keynote was given by {v} this year.",
            "A note from {v} is on the fridge.",
        ],
        EN_ADDRESS: [
            "Send the samples to {v} please.",
            "shipping_address: {v}",
            "We looked at a flat on {v} last week.",
            "The meeting point is {v}.",
        ],
        ZH_PERSON: [
            "Approved by {v}.",
            "reviewer: {v} (team B)",
            "负责人：{v}；截止周五。",
            "at {v} about the budget",
            "[{v}] pushed 3 commits",
        ],
        ZH_ADDRESS: ["ship_to={v}", "The lab is located at {v}.", "寄件地址：{v}，邮编待补。", "Address on file: {v}"],
    },
}

# Hard negatives set in the same templates: a detection touching one is a false alarm.
NEGATIVES = {
    "tune": [
        "May",
        "June",
        "August",
        "Will",
        "Grace",
        "Apple Watch",
        "Paris",
        "Georgia",
        "Jordan",
        "上海",
        "武汉",
        "江西",
        "广东省",
        "华为",
        "小米",
        "周末",
        "高兴",
        "金融",
        "黄金",
        "安全",
        "Kindle Paperwhite",
        "Honda Civic",
        "苏州",
        "成都",
        "明天",
    ],
    "held_out": [
        "April",
        "Summer",
        "Victoria",
        "Sydney",
        "Chase",
        "Dallas",
        "Galaxy Tab",
        "北京",
        "杭州",
        "湖南",
        "四川省",
        "海尔",
        "联想",
        "王国",
        "方法",
        "时间",
        "文化",
        "温州",
        "常州",
        "石家庄",
        "Surface Pro",
        "Model Y",
        "重庆",
        "江苏",
    ],
}

_NEG_TEMPLATES = {
    "tune": ["The word {v} appears in the title.", "see {v} for details", "备注：{v}，无。", "tag={v} ok"],
    "held_out": ["The report mentions {v} twice.", "category: {v}", "说明：{v}。", "[{v}] updated"],
}

SEEDS = {"tune": 101, "held_out": 202}


def _value(kind: str, en, zh) -> str:
    if kind == EN_PERSON:
        return f"{en.first_name()} {en.last_name()}"
    if kind == EN_ADDRESS:
        return en.street_address()
    if kind == ZH_PERSON:
        return zh.name()
    return zh.address().split(" ")[0] if zh.random.random() < 0.6 else zh.street_address()


def faker_samples(split: str, per_kind: int = 250) -> list[Sample]:
    """`per_kind` samples of each of the four kinds and as many hard negatives."""
    from faker import Faker

    en, zh = Faker("en_US"), Faker("zh_CN")
    en.seed_instance(SEEDS[split])
    zh.seed_instance(SEEDS[split] + 1)
    rng = random.Random(SEEDS[split])
    out = []
    for kind in KINDS:
        for _ in range(per_kind):
            value = _value(kind, en, zh)
            head, tail = rng.choice(TEMPLATES[split][kind]).split("{v}")
            out.append(Sample(head + value + tail, positives=[(TYPE_OF[kind], len(head), len(head) + len(value))]))
            out[-1].kind = kind
    for _ in range(per_kind):
        value = rng.choice(NEGATIVES[split])
        head, tail = rng.choice(_NEG_TEMPLATES[split]).split("{v}")
        out.append(Sample(head + value + tail, negatives=[(len(head), len(head) + len(value))]))
        out[-1].kind = None
    return out


def recall_by_kind(samples: list[Sample], spans: list[list[pii.Finding]]) -> dict:
    """Recall of each kind (a finding of the right type overlapping the value) and the
    share of hard negatives no finding touched."""
    out = {}
    for kind in KINDS:
        mine = [(s, f) for s, f in zip(samples, spans, strict=False) if s.kind == kind]
        hit = sum(
            any(x.type == TYPE_OF[kind] and x.start < b and x.end > a for x in f)
            for s, f in mine
            for _, a, b in s.positives
        )
        out[kind] = hit / max(1, len(mine))
    negatives = [(s, f) for s, f in zip(samples, spans, strict=False) if s.kind is None]
    out["negatives_intact"] = sum(
        not any(x.start < b and x.end > a for x in f for a, b in s.negatives) for s, f in negatives
    ) / max(1, len(negatives))
    return out
