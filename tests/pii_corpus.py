"""A labeled PII corpus: valid positives of every type (checksums computed, not copied)
and the hard negatives that must survive. Shared by the tests and the benchmark."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from dataclasses import dataclass, field

from kfp_llmops.components.data_validation import pii

_GB11643_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def luhn_complete(prefix_and_body: str) -> str:
    """Append the Luhn check digit."""
    for d in "0123456789":
        if pii.luhn_valid(prefix_and_body + d):
            return prefix_and_body + d
    raise AssertionError


def luhn_break(number: str) -> str:
    last = int(number[-1])
    return number[:-1] + str((last + 1 + random.Random(number).randint(0, 8)) % 10)


def card(rng: random.Random) -> str:
    prefix, length = rng.choice(
        [
            ("4", 16),
            ("51", 16),
            ("55", 16),
            ("2221", 16),
            ("34", 15),
            ("37", 15),
            ("6011", 16),
            ("65", 16),
            ("3530", 16),
            ("62", 16),
        ]
    )
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    number = luhn_complete(body)
    style = rng.random()
    if style < 0.4 and length == 16:
        return " ".join(number[i : i + 4] for i in range(0, 16, 4))
    if style < 0.6 and length == 16:
        return "-".join(number[i : i + 4] for i in range(0, 16, 4))
    return number


def iban(rng: random.Random) -> str:
    country = rng.choice(["DE", "GB", "FR", "NL", "ES", "IT", "CH", "BE", "PL", "SE"])
    n = pii.IBAN_LENGTHS[country]
    if country == "GB":
        bban = rng.choice(["NWBK", "BARC", "HBUK"]) + "".join(rng.choice(string.digits) for _ in range(14))
    elif country == "NL":
        bban = rng.choice(["ABNA", "RABO", "INGB"]) + "".join(rng.choice(string.digits) for _ in range(10))
    else:
        bban = "".join(rng.choice(string.digits) for _ in range(n - 4))
    numeric = "".join(str(int(ch, 36)) for ch in bban + country + "00")
    check = 98 - int(numeric) % 97
    value = f"{country}{check:02d}{bban}"
    assert pii.iban_valid(value)
    if rng.random() < 0.5:
        return " ".join(value[i : i + 4] for i in range(0, len(value), 4))
    return value


def cn_id(rng: random.Random) -> str:
    area = str(rng.randint(110000, 659999))
    birth = f"{rng.randint(1950, 2005)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
    body = area + birth + f"{rng.randint(0, 999):03d}"
    total = sum(int(ch) * w for ch, w in zip(body, _GB11643_WEIGHTS, strict=False))
    return body + "10X98765432"[total % 11]


def ssn(rng: random.Random) -> str:
    area = rng.choice([n for n in range(1, 900) if n != 666])
    return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


def email(rng: random.Random) -> str:
    user = rng.choice(["john.doe", "a.smith", "li.wei", "maria_garcia", "ops+alerts", "k.tanaka"])
    number = rng.randint(1, 999)  # drawn before the domain: the corpus stays the same
    domain = rng.choice(["example.com", "mail.example.org", "uni.example.edu", "corp.co.uk"])
    return f"{user}{number}@{domain}"


def phone(rng: random.Random) -> str:
    return rng.choice(
        [
            f"+1 {rng.randint(201, 989)} {rng.randint(200, 999)} {rng.randint(1000, 9999)}",
            f"({rng.randint(201, 989)}) {rng.randint(200, 999)}-{rng.randint(1000, 9999)}",
            f"{rng.randint(201, 989)}-{rng.randint(200, 999)}-{rng.randint(1000, 9999)}",
            f"+44 20 {rng.randint(1000, 9999)} {rng.randint(1000, 9999)}",
            f"+49 30 {rng.randint(100000, 999999)}",
            f"+33 1 {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)}",
            f"+86 {rng.choice(['138', '139', '186', '150'])} {rng.randint(1000, 9999)} {rng.randint(1000, 9999)}",
            f"{rng.choice(['138', '139', '186', '150'])}{rng.randint(10000000, 99999999)}",
            f"010-{rng.randint(10000000, 99999999)}",
        ]
    )


def ipv4(rng: random.Random) -> str:
    return ".".join(str(rng.randint(1, 254)) for _ in range(4))


def ipv6(rng: random.Random) -> str:
    groups = [f"{rng.randint(0, 0xFFFF):x}" for _ in range(8)]
    if rng.random() < 0.5:
        return "2001:db8:" + ":".join(groups[2:5]) + "::" + groups[7]
    return ":".join(groups)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(rng: random.Random) -> str:
    head = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64url(json.dumps({"sub": str(rng.randint(1, 10**9)), "name": "x"}).encode())
    sig = _b64url(rng.randbytes(32))
    return f"{head}.{body}.{sig}"


def cloud_key(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.5:
        return "AKIA" + "".join(rng.choice(string.ascii_uppercase + "234567") for _ in range(16))
    if kind < 0.75:
        return "AIza" + "".join(rng.choice(string.ascii_letters + string.digits + "_-") for _ in range(35))
    return "ghp_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))


def private_key(rng: random.Random) -> str:
    body = "\n".join(base64.b64encode(rng.randbytes(48)).decode() for _ in range(4))
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


def bearer(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(32))


GENERATORS = {
    pii.EMAIL: (email, ["Contact {v} for details.", "Send it to {v} please."]),
    pii.PHONE: (phone, ["Call me at {v} tomorrow.", "My number is {v}."]),
    pii.IPV4: (ipv4, ["The server at {v} is down.", "Login from {v} was blocked."]),
    pii.IPV6: (ipv6, ["Reach the host on {v} now.", "Traffic came from {v} today."]),
    pii.CREDIT_CARD: (card, ["My card number is {v}.", "Charge {v} for the order."]),
    pii.IBAN: (iban, ["Wire the money to {v} today.", "Account: {v}"]),
    pii.US_SSN: (ssn, ["SSN {v} on file.", "Her social security number is {v}."]),
    pii.CN_RESIDENT_ID: (cn_id, ["身份证号 {v}", "ID card {v} was scanned."]),
    pii.CLOUD_KEY: (cloud_key, ["key = {v}", "Use {v} for the upload."]),
    pii.PRIVATE_KEY: (private_key, ["Here is the key:\n{v}\nkeep it safe."]),
    pii.JWT: (jwt, ["token={v}", "The session token {v} expired."]),
    pii.BEARER_TOKEN: (bearer, ["Authorization: Bearer {v}", "curl -H 'Authorization: Bearer {v}'"]),
}


def hard_negative(rng: random.Random) -> tuple[str, str]:
    """(template, value) that must come through untouched."""
    kind = rng.randrange(10)
    if kind == 0:  # Luhn-invalid 16 digits with a card-like prefix
        v = luhn_break(card(rng).replace(" ", "").replace("-", "")[:16].ljust(16, "0"))
        while pii.luhn_valid(v):
            v = luhn_break(v)
        return "Reference number {v} is invalid.", v
    if kind == 1:
        return "Order {v} has shipped.", rng.choice(
            [
                f"ORD-{rng.randint(2019, 2026)}-{rng.randint(100000, 999999)}",
                f"#{rng.randint(10**9, 10**10 - 1)}",
                f"{rng.randint(10**10, 10**11 - 1)}",
            ]
        )
    if kind == 2:
        return "Logged at {v} by the job.", rng.choice(
            [
                f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
                f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z",
                f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
                f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
                str(rng.randint(1_600_000_000, 1_800_000_000)),
                str(rng.randint(1_600_000_000_000, 1_800_000_000_000)),
            ]
        )
    if kind == 3:
        return "Upgrade to version {v} now.", rng.choice(
            [
                f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 20)}",
                f"v{rng.randint(1, 12)}.{rng.randint(0, 9)}.{rng.randint(0, 99)}",
                f"{rng.randint(1, 5)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}",
            ]
        )
    if kind == 4:
        isbn = luhn_complete("978" + "".join(rng.choice(string.digits) for _ in range(8)) + "0")[:13]
        return "The book ISBN {v} is in stock.", rng.choice(
            [isbn, f"978-{rng.randint(0, 9)}-{rng.randint(10, 99)}-{rng.randint(100000, 999999)}-{rng.randint(0, 9)}"]
        )
    if kind == 5:
        data = rng.randbytes(16)
        return "Checksum {v} matches.", rng.choice(
            [hashlib.sha256(data).hexdigest(), hashlib.sha1(data).hexdigest(), hashlib.md5(data).hexdigest()]
        )
    if kind == 6:
        return "Request id {v} failed.", str(uuid.UUID(bytes=rng.randbytes(16)))
    if kind == 7:
        return (
            "The meeting is at {v} today.",
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
        )
    if kind == 8:
        return "Invoice {v} is due.", f"INV-{rng.randint(10**7, 10**8 - 1)}"
    return "It costs {v} dollars.", f"{rng.randint(1, 99999)}.{rng.randint(0, 99):02d}"


@dataclass
class Sample:
    text: str
    positives: list[tuple[str, int, int]] = field(default_factory=list)  # (type, start, end)
    negatives: list[tuple[int, int]] = field(default_factory=list)  # (start, end)


_FILLER = [
    "The weather was mild and the team shipped the release.",
    "Please review the attached notes before the meeting.",
    "The model was trained on public domain books.",
    "We met at the cafe and talked about gardening.",
]


def labeled_samples(n: int, seed: int = 0) -> list[Sample]:
    """n samples: about half hold one PII value, half one hard negative, all with filler."""
    rng = random.Random(seed)
    types = list(GENERATORS)
    out = []
    for i in range(n):
        filler = rng.choice(_FILLER)
        if i % 2 == 0:
            kind = types[(i // 2) % len(types)]
            gen, templates = GENERATORS[kind]
            template, value = rng.choice(templates), gen(rng)
        else:
            kind = None
            template, value = hard_negative(rng)
        prefix = filler + " "
        head, tail = template.split("{v}")
        text = prefix + head + value + tail
        start = len(prefix) + len(head)
        sample = Sample(text)
        if kind:
            sample.positives.append((kind, start, start + len(value)))
        else:
            sample.negatives.append((start, start + len(value)))
        out.append(sample)
    return out


# --- person names and postal addresses (names.py) --------------------------------------

# Drawn from many origins on purpose; several are not in the US Census lists the detector
# uses, so those are found only from their context (titles, introductions) or by NER.
EN_GIVEN = [
    "Maria",
    "James",
    "Olivia",
    "Liam",
    "Sophia",
    "Noah",
    "Emma",
    "Lucas",
    "Aisha",
    "Mohammed",
    "Priya",
    "Rahul",
    "Yuki",
    "Hiroshi",
    "Fatima",
    "Omar",
    "Ingrid",
    "Lars",
    "Giulia",
    "Marco",
    "Elena",
    "Dmitri",
    "Anastasia",
    "Kwame",
    "Amara",
    "Chidi",
    "Oluwaseun",
    "Siobhan",
    "Niamh",
    "Carlos",
    "Lucia",
    "Mateo",
    "Isabella",
    "Hannah",
    "Daniel",
    "Sarah",
    "Thomas",
    "Wei",
    "Grace",
    "Will",
    "Rose",
    "Bill",
    "Mark",
    "May",
    "Jack",
    "Ruby",
    "Victor",
    "Dawn",
]
EN_SURNAMES = [
    "Garcia",
    "Smith",
    "Johnson",
    "Nguyen",
    "Patel",
    "Kim",
    "Müller",
    "Rossi",
    "Kowalski",
    "Okafor",
    "Adeyemi",
    "Tanaka",
    "Sato",
    "Haddad",
    "Johansson",
    "Novak",
    "Ivanova",
    "O'Brien",
    "McCarthy",
    "Fernandez",
    "Silva",
    "Kaur",
    "Cohen",
    "Dubois",
    "Schneider",
    "Andersen",
    "Mensah",
    "Hernandez",
    "Lopez",
    "Wright",
    "Turner",
    "Walsh",
    "Chen",
    "Park",
]
EN_PERSON_TEMPLATES = [
    "Hi, I'm {full}, my order never arrived.",
    "{full} called yesterday about the refund.",
    "Please forward this to {full} in accounting.",
    "Dear {first}, thanks for your patience.",
    "{title} {last} will review the contract.",
    "My name is {full} and I need help with my account.",
    "The report was written by {full} last week.",
    "Can {full} join the call on Friday?",
    "Regards, {full}",
    "Thanks {first}, that fixed it.",
    "I spoke with {title} {last} this morning.",
    "Ask for {full} at the front desk.",
]
ZH_SURNAME_POOL = [
    "王",
    "李",
    "张",
    "刘",
    "陈",
    "杨",
    "黄",
    "赵",
    "吴",
    "周",
    "徐",
    "孙",
    "马",
    "朱",
    "胡",
    "郭",
    "何",
    "高",
    "林",
    "罗",
    "欧阳",
    "司马",
    "诸葛",
]
ZH_GIVEN_POOL = [
    "伟",
    "芳",
    "娜",
    "敏",
    "静",
    "丽",
    "强",
    "磊",
    "洋",
    "艳",
    "勇",
    "军",
    "杰",
    "涛",
    "明",
    "秀英",
    "小明",
    "建国",
    "志强",
    "海燕",
    "丽华",
    "晓东",
    "思远",
    "雨欣",
    "子涵",
    "浩然",
]
ZH_PERSON_TEMPLATES = [
    "我叫{full}，想查询一下订单。",
    "我是{full}，今天下的单。",
    "收件人：{full}，请尽快发货。",
    "{full}先生您好，您的包裹已发出。",
    "{sur}女士昨天来过电话。",
    "谢谢{full}老师的帮助。",
    "联系人：{full}",
    "请转告{full}经理明天开会。",
    "您好，{full}同学，作业已批改。",
]
EN_STREETS = [
    "Baker",
    "Maple",
    "Oak",
    "Pine",
    "Elm",
    "Cedar",
    "Washington",
    "Lake",
    "Hill",
    "Sunset",
    "Highland",
    "Main",
    "Church",
    "Mill",
    "Victoria",
    "King",
    "Queen",
    "Bridge",
    "Green",
    "Riverside",
]
EN_STREET_TYPES = [
    "Street",
    "St.",
    "Avenue",
    "Ave",
    "Road",
    "Rd",
    "Lane",
    "Drive",
    "Boulevard",
    "Court",
    "Place",
    "Way",
    "Close",
    "Crescent",
]
EN_CITIES = [("Springfield", "IL"), ("Austin", "TX"), ("Portland", "OR"), ("Boston", "MA"), ("Denver", "CO")]
EN_ADDRESS_TEMPLATES = [
    "My parcel to {a} never arrived.",
    "Please ship it to {a}.",
    "I moved to {a} last month.",
    "The office is at {a}, second floor.",
    "Send the invoice to {a} instead.",
]
ZH_REGIONS = [
    "北京市朝阳区",
    "上海市浦东新区",
    "广东省广州市天河区",
    "浙江省杭州市西湖区",
    "四川省成都市武侯区",
    "江苏省南京市鼓楼区",
    "湖北省武汉市洪山区",
    "深圳市南山区",
    "",
]
ZH_ROADS = [
    "建国路",
    "中山路",
    "人民路",
    "解放大道",
    "南京东路",
    "世纪大道",
    "文三路",
    "科华北路",
    "珞喻路",
    "长江路",
    "和平街",
    "幸福巷",
]
ZH_ADDRESS_TEMPLATES = [
    "我住在{a}，请送货上门。",
    "请把包裹寄到{a}。",
    "地址：{a}",
    "公司位于{a}，欢迎来访。",
    "收货地址是{a}，谢谢。",
]
PUBLIC_FIGURES = ["Abraham Lincoln", "Marie Curie", "Albert Einstein", "Ada Lovelace", "Nelson Mandela"]
NAME_HARD_NEGATIVES = [
    # product names
    "The Apple Watch and the Surface Pro are on sale.",
    "I upgraded to the Galaxy Note last week.",
    "Our Echo Dot stopped responding after the update.",
    "The Kindle Paperwhite battery lasts weeks.",
    "Try the Model Y before you buy a car.",
    "The Xbox Series controller needs new batteries.",
    # places without a street
    "We flew from Paris to New York in the spring.",
    "The conference is in San Francisco this year.",
    "Baker Street station is closed today.",
    "We stayed near Lake Geneva for a week.",
    "The trail crosses the Rocky Mountains.",
    "我们去了北京市朝阳区，长安街很美。",
    "他在上海工作了三年。",
    "杭州西湖的风景很好。",
    # capitalised sentence starts and headings
    "Thank You For Your Order",
    "Please Review The Attached File before Monday.",
    "Great Question, the answer is below.",
    "Customer Support will reply within a day.",
    # months, weekdays
    "See you on Monday, May 12.",
    "The sale ends in June.",
    "We met on Tuesday, April 4.",
    "August is the hottest month here.",
    # common words that are also first names
    "Will you review the Rose Garden plan?",
    "May I ask a question about billing?",
    "Bill the customer for the upgrade.",
    "Mark the ticket as resolved.",
    "Grace Period Ends Soon for renewals.",
    "Frank Discussion Needed on the budget.",
    # Chinese words that start with a surname character
    "王国的历史很长。",
    "我很高兴见到你。",
    "马上就到，请稍等。",
    "周末去公园散步。",
    "黄金价格上涨了。",
    "我是新用户，请多关照。",
    # numbers before capitalised words that are not addresses
    "Top 10 Park Avenue restaurants are listed here.",
    "Chapter 3 Main Street Stories begins here.",
    # public figures in encyclopaedic text (allowed in the config)
    "Abraham Lincoln was the 16th president of the United States.",
    "Marie Curie won two Nobel Prizes.",
    "Albert Einstein published the theory of relativity in 1905.",
    "Ada Lovelace wrote the first published algorithm.",
    "Nelson Mandela was released in 1990.",
]


def _en_person(rng: random.Random) -> tuple[str, str]:
    first, last = rng.choice(EN_GIVEN), rng.choice(EN_SURNAMES)
    template = rng.choice(EN_PERSON_TEMPLATES)
    title = rng.choice(["Mr.", "Ms.", "Dr.", "Mrs.", "Prof."])
    return template, {"full": f"{first} {last}", "first": first, "last": last, "title": title}


def _person(rng: random.Random) -> tuple[str, str]:
    """(text, value) with the name at `{v}`."""
    if rng.random() < 0.6:
        template, parts = _en_person(rng)
        key = "full" if "{full}" in template else ("first" if "{first}" in template else None)
        if key is None:  # "{title} {last}"
            return template.replace("{title} {last}", "{v}"), f"{parts['title']} {parts['last']}"
        return template.replace("{" + key + "}", "{v}"), parts[key]
    sur, given = rng.choice(ZH_SURNAME_POOL), rng.choice(ZH_GIVEN_POOL)
    template = rng.choice(ZH_PERSON_TEMPLATES)
    if "{sur}" in template:
        return template.replace("{sur}", "{v}"), sur
    return template.replace("{full}", "{v}"), sur + given


def _address(rng: random.Random) -> tuple[str, str]:
    if rng.random() < 0.55:
        a = f"{rng.randint(1, 2999)} {rng.choice(EN_STREETS)} {rng.choice(EN_STREET_TYPES)}"
        roll = rng.random()
        if roll < 0.3:
            a += f", Apt {rng.randint(1, 40)}{rng.choice('ABCD')}"
        if roll > 0.5:
            city, state = rng.choice(EN_CITIES)
            a += f", {city}, {state} {rng.randint(10000, 99999)}"
        elif roll > 0.35:
            district = rng.choice(["NW1", "SE1", "E2", "W1A"])
            a += f", London {district} {rng.randint(1, 9)}{rng.choice('ABDEFGHJ')}{rng.choice('LNPQRSTU')}"
        return rng.choice(EN_ADDRESS_TEMPLATES).replace("{a}", "{v}"), a
    a = f"{rng.choice(ZH_REGIONS)}{rng.choice(ZH_ROADS)}{rng.randint(1, 999)}号"
    a += rng.choice(
        [
            "",
            f"{rng.randint(1, 20)}号楼{rng.randint(101, 2505)}室",
            f"{rng.randint(1, 6)}单元{rng.randint(101, 2505)}室",
        ]
    )
    return rng.choice(ZH_ADDRESS_TEMPLATES).replace("{a}", "{v}"), a


def name_samples(n: int, seed: int = 0) -> list[Sample]:
    """n samples: a third PERSON, a third ADDRESS, a third a hard negative (whole text)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = (PERSON_KIND, ADDRESS_KIND, None)[i % 3]
        if kind is None:
            text = rng.choice(NAME_HARD_NEGATIVES)
            out.append(Sample(text, negatives=[(0, len(text))]))
            continue
        template, value = (_person if kind == PERSON_KIND else _address)(rng)
        head, tail = template.split("{v}")
        text = head + value + tail
        out.append(Sample(text, positives=[(kind, len(head), len(head) + len(value))]))
    return out


PERSON_KIND, ADDRESS_KIND = pii.PERSON, pii.ADDRESS


# Written apart from the generator and not used to tune the detector: a check that the
# figures on our own distribution are not an artefact of it. (text, type, value) or
# (text, None, None) for a hard negative.
HELD_OUT = [
    ("The Golden Gate Bridge was busy.", None, None),
    ("I love Google Maps for directions.", None, None),
    ("Our team uses Microsoft Teams daily.", None, None),
    ("Visit Central Park in the fall.", None, None),
    ("The Boston Red Sox won again.", None, None),
    ("He studied at Stanford University.", None, None),
    ("Try the Big Mac at lunch.", None, None),
    ("Read the Terms Of Service first.", None, None),
    ("The Lord Of The Rings is long.", None, None),
    ("We watched Star Wars on Friday.", None, None),
    ("Happy New Year to all!", None, None),
    ("The North Face jacket is warm.", None, None),
    ("Our Chief Executive Officer spoke.", None, None),
    ("Christmas Eve dinner was great.", None, None),
    ("Turn on Dark Mode in Settings.", None, None),
    ("Use Visual Studio Code for Python.", None, None),
    ("这个产品很好用，我很满意。", None, None),
    ("请问明天北京天气怎么样？", None, None),
    ("我在华为工作。", None, None),
    ("The 5 Star Hotel was fine.", None, None),
    ("Room 12 Main Building is on the left.", None, None),
    ("Flight 370 Kuala Lumpur route was changed.", None, None),
    ("Please ask Jennifer Lawrence-Cho about the lease.", pii.PERSON, "Jennifer Lawrence-Cho"),
    ("Contact Ahmed Al-Farsi for access.", pii.PERSON, "Ahmed Al-Farsi"),
    ("Yesterday Priscilla Nakamura emailed us.", pii.PERSON, "Priscilla Nakamura"),
    ("Send the files to Kevin O'Connell tomorrow.", pii.PERSON, "Kevin O'Connell"),
    ("My manager, Dmitri Volkov, approved it.", pii.PERSON, "Dmitri Volkov"),
    ("Ms Nguyen will call back.", pii.PERSON, "Nguyen"),
    ("请联系陈静女士。", pii.PERSON, "陈静"),
    ("我的名字叫赵云飞。", pii.PERSON, "赵云飞"),
    ("客户：刘德明", pii.PERSON, "刘德明"),
    ("Ship it to 77 Massachusetts Ave, Cambridge, MA 02139.", pii.ADDRESS, "77 Massachusetts Ave"),
    ("Our new office: 350 Fifth Avenue, New York, NY 10118.", pii.ADDRESS, "350 Fifth Avenue"),
    ("寄到浙江省杭州市余杭区文一西路969号。", pii.ADDRESS, "文一西路969号"),
]


def held_out_samples() -> list[Sample]:
    out = []
    for text, kind, value in HELD_OUT:
        if kind is None:
            out.append(Sample(text, negatives=[(0, len(text))]))
        else:
            start = text.index(value)
            out.append(Sample(text, positives=[(kind, start, start + len(value))]))
    return out


def score_by_type(samples: list[Sample], spans: list[list[pii.Finding]]) -> dict:
    """Per name type, recall and precision (a detection of that type overlapping a labeled
    value of that type); and the share of hard negatives no detection touched."""
    out: dict = {}
    for kind in (pii.PERSON, pii.ADDRESS):
        total = hit = tp = fp = 0
        for s, found in zip(samples, spans, strict=False):
            mine = [(f.start, f.end) for f in found if f.type == kind]
            wanted = [(a, b) for k, a, b in s.positives if k == kind]
            total += len(wanted)
            hit += sum(any(x < b and y > a for x, y in mine) for a, b in wanted)
            for x, y in mine:
                if any(x < b and y > a for a, b in wanted):
                    tp += 1
                else:
                    fp += 1
        out[kind] = {"recall": hit / max(1, total), "precision": tp / max(1, tp + fp), "detections": tp + fp}
    negatives = [f for s, f in zip(samples, spans, strict=False) if s.negatives]
    out["hard_negatives_intact"] = sum(not f for f in negatives) / max(1, len(negatives))
    return out
