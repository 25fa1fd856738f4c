"""Person names and postal addresses, in English and Chinese, at pattern-engine speed.

A cheap candidate pass runs on every string: dictionaries of given names and surnames
(the US Census lists shipped in the `names` package), titles, self-introductions and
greetings, Chinese surnames with their cues (我是/叫, 先生/女士, field labels), and
address shapes (a house number, words and a street type; a Chinese road with its
number). Most candidates are decided there: an unambiguous given name followed by a
capitalised word is a name. Only the ambiguous ones (a given name that is also a common
word, month or place, "Will", "May", "Rose", "Bill"; an unknown word after "I'm" or
"Dear"; a capitalised word before a surname) go to the pinned spaCy NER model, one
sentence each, batched across records. Findings are `pii.Finding`s, overlaps resolved
as the pattern engine resolves its own (`pii.resolve_overlaps`).
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .pii import ADDRESS, PERSON, Finding, is_han, resolve_overlaps

# Given names that are also common words, months, weekdays, places or product names:
# a capitalised word after them is not enough, the NER model decides.
AMBIGUOUS_GIVEN = frozenset(
    """
will may rose bill mark june april august grace hope joy faith art rich frank jack pat sue
don guy max bob ray dawn summer autumn winter iris lily daisy ruby amber crystal pearl
violet holly ivy heather sky rocky sandy dean chase hunter carter mason wade miles chuck
chip rusty buck drew gene homer sterling angel christian victor major page penny
sunny star storm river brook glen dale clay cliff rod pierce lane price
jordan georgia virginia florence austin charlotte houston phoenix madison aurora paris
chelsea sydney victoria lincoln savannah camden eugene helena regina adelaide orlando
denver dallas tyler raleigh carolina dakota alexandria israel india china kent
echo alexa siri apple galaxy harmony melody unity trinity destiny justice liberty
royal king prince duke earl baron lord noble young long white brown green black
gray grey bay cole west north south east best new
""".split()
)

# Capitalised words that end a name rather than continue it.
STOP_CAPS = frozenset(
    """
the a an and or but of in on at to for from with by as is are was were be i i'm it its
this that these those my your his her our their we you he she they me us them
mr mrs ms miss mx dr prof sir dame madam
monday tuesday wednesday thursday friday saturday sunday
january february march april may june july august september october november december
street st avenue ave road rd boulevard blvd lane ln drive court ct place pl terrace way
square sq parkway pkwy highway hwy close crescent circle trail row mews gardens grove
inc ltd llc corp co company group bank university college school hospital airport station
hotel museum center centre institute foundation church club team
please thanks thank hello hi hey dear regards cheers yes no ok okay can could would should
did does do how what when where why who which if so then also after before today ask send tell let
customer customers all everyone everybody there again world friend friends
colleagues guys folks user users member members valued support sales garden
im ive ill id youre theyre weve dont cant wont isnt lets
""".split()
)
FUNCTION_WORDS = frozenset("the a an and or but of in on at to for from with by as is are was were be".split())

TITLES = frozenset("mr mrs ms miss mx dr prof sir dame madam".split())
_CAPITAL = r"[A-Z\u00C0-\u00DE]"
_AFTER_CAPITAL = r"[a-z\u00DF-\u00FF]*(?:[A-Z][a-z\u00DF-\u00FF]+)?(?:['\u2019-][A-Z]?[a-z\u00DF-\u00FF]+)?"
_CAPWORD = _CAPITAL + _AFTER_CAPITAL
_WORD_CHAR = r"[\w'\u2019-]"  # what a capitalised word may not touch on either side
# A capital not after a word character: the capital first and the character before it
# checked after it (`(?<!{_WORD_CHAR}.)`), so `re` skips from capital to capital; a
# pattern that opens with its lookbehind is tried at every position, 1.5x the time of the
# name pass's scan here.
_CAPS = re.compile(rf"{_CAPITAL}(?<!{_WORD_CHAR}.){_AFTER_CAPITAL}(?!{_WORD_CHAR})")
# A cue right before a capitalised word. Strong cues name whoever follows; weak ones only
# with a known given name or a vocative ("Thanks Priya," / "Hi Will!").
_STRONG_CUES = "my name is|my name's|name:|call me|signed|regards|sincerely|dear"
_WEAK_CUES = (
    "i am|i'm|i\u2019m|this is|ask for|speak to|speak with|spoke with|contact|hi|hello|hey|thanks|thank you|cheers"
)
_CUE_BEFORE = re.compile(rf"(?:(?P<strong>\b(?i:{_STRONG_CUES}))|\b(?i:{_WEAK_CUES})),? +$")
_CUE_LAST = frozenset(
    "is name's name: me signed regards sincerely dear am i'm i\u2019m for to with "
    "contact hi hello hey thanks you cheers".split()
)
_VOCATIVE_END = re.compile(r" ?(?:[,!:;\n]|\.(?:\s|$)|$)")
_SENTENCE_END = re.compile(r"(?:^|[.!?:;\n\"'\u201c(]\s*)$")

# Street suffixes: USPS Publication 28, appendix C1 (its primary names, singular and
# plural), and British forms. Abbreviations may carry their period; a full word's
# period ends the sentence.
STREET_SUFFIXES = tuple(
    """
Alley Annex Arcade Avenue Bayou Beach Bend Bluff Bluffs Bottom Boulevard Branch Bridge Brook
Brooks Burg Burgs Bypass Camp Canyon Cape Causeway Center Centers Circle Circles Cliff Cliffs
Club Common Commons Corner Corners Course Court Courts Cove Coves Creek Crescent Crest Crossing
Crossroad Crossroads Curve Dale Dam Divide Drive Drives Estate Estates Expressway Extension
Extensions Fall Falls Ferry Field Fields Flat Flats Ford Fords Forest Forge Forges Fork Forks
Fort Freeway Garden Gardens Gateway Glen Glens Green Greens Grove Groves Harbor Harbors Haven
Heights Highway Hill Hills Hollow Inlet Island Islands Isle Junction Junctions Key Keys Knoll
Knolls Lake Lakes Land Landing Lane Light Lights Loaf Lock Locks Lodge Loop Mall Manor Manors
Meadow Meadows Mews Mill Mills Mission Motorway Mount Mountain Mountains Neck Orchard Oval
Overpass Park Parks Parkway Parkways Pass Passage Path Pike Pine Pines Place Plain Plains Plaza
Point Points Port Ports Prairie Radial Ramp Ranch Rapid Rapids Rest Ridge Ridges River Road
Roads Route Row Rue Run Shoal Shoals Shore Shores Skyway Spring Springs Spur Spurs Square
Squares Station Stravenue Stream Street Streets Summit Terrace Throughway Trace Track
Trafficway Trail Trailer Tunnel Turnpike Underpass Union Unions Valley Valleys Viaduct View
Views Village Villages Ville Vista Walk Walks Wall Way Ways Well Wells Close Row Wynd
""".split()
)
_STREET_TYPES = (
    rf"(?:{'|'.join(sorted(set(STREET_SUFFIXES), key=len, reverse=True))})\b"
    r"|(?:St|Ave|Rd|Blvd|Ln|Dr|Ct|Pl|Sq|Pkwy|Hwy|Cir|Ctr|Expy|Fwy|Hts|Jct|Pt|Ter|Trl|Tpke)\b\.?"
)
# Starts with a character class (no lookbehind: checked by hand) so the engine skips ahead
# fast; a house number must be followed by a capitalised word (`_NUMBER_WORD`, the gate).
_NUMBER_WORD = re.compile(r"[0-9][A-Za-z]?,? [A-Z]")
_EN_ADDRESS = re.compile(
    r"(?:[0-9]{1,5}[A-Za-z]?(?:-[0-9]{1,5})?,? (?:(?:North|South|East|West|[NSEW])\.? )?"
    rf"(?:[A-Z][a-z]+\.? ){{1,3}}(?:{_STREET_TYPES})(?: (?:NW|NE|SW|SE)\b)?"
    r"|P\.? ?O\.? Box [0-9]{1,6})"
    r"(?:,? (?:Apt|Apartment|Suite|Ste|Unit|Flat|Floor|Fl|#)\.? ?#?[0-9A-Za-z]{1,5})?"
    r"(?:, ?[A-Z][a-z]+(?: [A-Z][a-z]+){0,2})?"
    r"(?:,? ?(?:[A-Z]{2} \d{5}(?:-\d{4})?|[A-Z]{1,2}\d[A-Z\d]? ?\d[A-Z]{2}))?(?![\w-])"
)
# What a raw JSON line must hold for `NameFinder.candidates` to find anything in one of
# its strings (`candidates.candidate_lines` looks for it a block at a time, names on):
# - a byte outside ASCII or a `\u` escape (the Chinese rules; any capital outside
#   ASCII), matched once a run, at its first byte or its last escape: one event a run
#   for Hyperscan to report, not one a character;
# - two capitalised words one space apart, the second where `_CAPS` can start a word (not
#   "KEY" or "INV-"): a pair, a title without its period, and every English address but
#   one whose every word ends in a period;
# - a title, its period and a capital ("Dr. Smith"): a capital, then the title's letters
#   in either case, an apostrophe or hyphen anywhere between them, as `_key` drops them;
# - a house number, a word, its period and a capital (the first word of an address whose
#   words all end in one: "12 Abc. Street"), or "O. Box" ("P.O. Box");
# - or a cue before a capital.
# A period after any other capitalised word ("...in Paris. The") is no candidate: on the
# bench corpus that is four lines in ten the name pass skips. JSON escapes none of these
# characters.
_TITLE_WORDS = "|".join(
    title[0].upper() + "".join(f"['-]?[{c}{c.upper()}]" for c in title[1:]) for title in sorted(TITLES)
)
LINE_CANDIDATE = (
    r"(?:^|[\x00-\x7f])[\x80-\xff]|\\u[0-9A-Fa-f]{4}(?:[^\\]|\\[^u]|$)"
    r"|[A-Z][A-Za-z'-]* [A-Z](?:[a-z]|[A-Z][a-z]|['-][A-Za-z]|[^A-Za-z0-9_'-]|$)"
    rf"|(?:{_TITLE_WORDS})\. [A-Z]|[0-9][A-Za-z]?,? [A-Z][a-z]*\. [A-Z]|O\. Box"
    rf"|(?i:{'|'.join(c for c in f'{_STRONG_CUES}|{_WEAK_CUES}'.split('|') if c.isascii())}),? +[A-Z]"
)
_ADDRESS_NEGATIVE = re.compile(
    r"(?i)\b(?:top|chapter|section|figure|table|page|step|part|version|order|invoice|ref|"
    r"route|platform|gate|level|room|bus|line)\W{0,2}$"
)

# --- Chinese -----------------------------------------------------------------------------
_HAN = "\u4e00-\u9fff"
ZH_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁"
    "任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武"
    "戴莫孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮"
    "柯纪梅童凌毕单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶解牟艾尤阳时穆农司卓古"
    "吉缪简车项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫"
    "寇桑郎甄丛仲虞敖巩明佘池查麻苑迟邝萧洪阎"
)
ZH_COMPOUND_SURNAMES = (
    "欧阳",
    "司马",
    "上官",
    "诸葛",
    "东方",
    "皇甫",
    "尉迟",
    "公孙",
    "慕容",
    "令狐",
    "夏侯",
    "长孙",
    "宇文",
    "司徒",
    "轩辕",
    "端木",
    "独孤",
    "南宫",
    "西门",
    "百里",
)
# Characters that end a given name (particles, verbs, pronouns): never part of one.
_ZH_STOP = frozenset(
    "的是在了和与及跟向对把被让给叫问请谢找住来去说要想也都就还又很这那个您你我他她它们"
    "从到于为以将已会能可有没不吗呢吧啊呀哦嗯，。、；：！？,.;:!? "
)
_ZH_LEAD = re.compile(
    r"(?:我是|我叫|叫做|名叫|名字叫|名字是|本人|姓名|联系人|收件人|收货人|寄件人|签名|经办人|申请人|患者|客户|致|亲爱的)"
    r"[：:\s]*"
)
_ZH_TITLE = re.compile(r"先生|女士|小姐|老师|医生|教授|经理|同学|律师|主任|总监|阿姨|叔叔|师傅|博士|大夫")
# Words whose last character is a surname but which end before a name ("谢谢李女士").
_ZH_BEFORE = ("谢谢", "感谢", "请问", "联系", "通知", "告诉", "拜访", "问候", "找到", "见到")
# A road or street with its number (…路969号) or its building (…街F座, …路12座).
_ZH_ROAD_NUMBER = re.compile(
    rf"[{_HAN}]{{1,12}}?(?:路|街|大道|大街|巷|胡同|弄)"
    r"(?:[0-9０-９一二三四五六七八九十百零]{1,5}号|[0-9A-Za-z]{1,4}(?=座)|[0-9０-９]{1,4}(?=栋|幢))"
    r"(?:[0-9A-Za-z]{0,4}(?:号楼|栋|幢|座|单元|层|楼|室|号))*"
)
# A name standing alone: a run of two to four Han characters between non-Han ones
# ("at 高丽 about", "客户信息：朱英，", "[梁鑫]"), a surname then one or two characters that
# are common in given names, and not a common word or a place.
_ZH_ALONE = re.compile(rf"(?<![{_HAN}])[{_HAN}]{{2,4}}(?![{_HAN}])")
ZH_GIVEN_CHARS = frozenset(
    "伟芳娜秀英敏静丽强磊军洋勇艳杰娟涛明超兰霞平刚桂华玉萍红娥玲芬燕彩春菊凤洁梅琳素云莲真环雪荣爱妹"
    "香月莺媛瑞凡佳嘉琼勤珍贞莉娣叶璐娅琦晶妍茜秋珊莎锦黛青倩婷姣婉娴瑾颖露瑶怡婵雁蓓仪荷丹蓉眉君琴蕊"
    "薇菁梦岚苑婕馨瑗琰韵融园艺咏卿聪澜纯毓悦昭冰爽琬茗羽希宁欣飘育滢馥筠柔竹霭凝晓欢霄枫芸菲寒伊亚宜"
    "可姬舒影荔枝思毅俊峰东文辉力永健世广志义兴良海山仁波贵福生龙元全国胜学祥才发武新利清飞彬富顺信"
    "子昌成康星光天达安岩中茂进林有坚和彪博诚先敬震振壮会群豪心邦承乐绍功松善厚庆民友裕河哲江浩亮政"
    "谦亨奇固之轮翰朗伯宏言若鸣朋斌梁栋维启克伦翔旭鹏泽晨辰士以建家致树炎德行时泰盛雄琛钧冠策腾楠榕"
    "风航弘鑫桂秀金凯宇轩睿涵琪萱雯瑜婧璇茹蕾慧鹤彤昊晖皓阳帆丰斐骏宸铭杨鹰楷坤琨淑雷兵帅莹柳小花"
)
# Everyday words that begin with a surname character and go on with given-name ones.
ZH_COMMON_WORDS = frozenset(
    """
高兴 安全 明天 王国 金融 黄金 江湖 和平 平安 成功 成立 成本 成为 万一 关于 包括 向上 常见 温和 温柔 石油
白天 金色 黄色 马上 龙头 钱包 程序 方向 方便 许多 许可 于是 余下 叶子 史诗 江山 海洋 严重 严格 华丽 华人
孔子 齐全 司机 古代 古老 左右 甘心 包含 宁可 尚未 应用 项目 连续 冷静 管理 全部 全国 全球 全面 商业 荣誉
时光 时期 明星 明白 明显 明确 文明 文学 文艺 文字 安静 安心 安装 安排 和谐 和好 康复 林业 东方 东西 东南
东北 高山 高中 高级 高楼 高峰 高速 周年 周期 吴语 金星 金山 金华 黄河 黄山 黄海 江南 江北 海南 山东 山西
云南 宁夏 广东 广西 湖北 南京 天津 国家 国际 国民 国庆 中国 中文 中心 中华 中学 华东 华北 华南 华中 龙江
长江 长城 长春 长安 万家 万达 万科 雷锋 钱江 孙子 孙女 唐山 宋朝 唐朝 明朝 汤圆 花园 田园 石头 白云 云海
""".split()
)
# Characters that end a place, an organisation or a thing, never a given name here.
_ZH_PLACE_END = frozenset("省市县区州镇乡村路街府局部院所司厂店馆城港湾岛湖河")
_ZH_ADDRESS_LEAD = re.compile(r".*(?:住在|住址|地址|寄到|寄往|送到|发到|发往|位于|搬到|在|到|于|是|为|给|：|:)")


@dataclass(frozen=True)
class Candidate:
    start: int
    end: int
    type: str
    confirm: bool  # True: the NER model must see a PERSON here


# --- dictionaries ------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def census_names() -> tuple[frozenset[str], frozenset[str]]:
    """(given names, surnames), lowercase, from the US Census 1990 lists in `names`."""
    try:
        import names as census
    except ImportError:
        from kfp_llmops.components.common.errors import InputError

        raise InputError(
            "pii.names: the `names` package (US Census name lists) is not installed; "
            "install kfp-llmops[data] or set pii.names.enabled: false"
        ) from None
    folder = os.path.dirname(census.__file__)

    def load(*files: str) -> frozenset[str]:
        out = set()
        for name in files:
            with open(os.path.join(folder, name), encoding="ascii") as handle:
                out.update(line.split(None, 1)[0].lower() for line in handle if line.strip())
        return frozenset(out)

    return load("dist.female.first", "dist.male.first"), load("dist.all.last")


# --- English -----------------------------------------------------------------------------


def _sentence_start(text: str, pos: int) -> bool:
    return _SENTENCE_END.search(text, max(0, pos - 4), pos) is not None


@functools.lru_cache(maxsize=1 << 14)  # a corpus's capitalised words repeat: most calls are hits
def _key(word: str) -> str:
    """Dictionary form: lowercase, accents and apostrophes dropped (Müller, O'Brien)."""
    word = word.lower()
    if word.isascii() and word.isalpha():
        return word
    folded = unicodedata.normalize("NFKD", word).encode("ascii", "ignore").decode()
    return folded.replace("'", "").replace("-", "")


def _english_people(text: str, given: frozenset[str], surnames: frozenset[str], out: list) -> None:
    """One scan for capitalised words; titles, cues and pairs are read off that list."""
    found = list(_CAPS.finditer(text))
    if not found or (len(found) == 1 and (found[0].start() == 0 or text[found[0].start() - 1] != " ")):
        return  # no capital, or one that opens the text: nothing here
    words = [(*m.span(), _key(m[0])) for m in found]
    n = len(words)
    adjacent = [words[k + 1][0] == words[k][1] + 1 and text[words[k][1]] == " " for k in range(n - 1)]
    adjacent.append(False)

    def extend(k: int) -> int:
        """Index of the last word of a name whose next-to-last word is `k`: a following
        known surname is a middle name or a double surname."""
        if adjacent[k] and words[k + 1][2] in surnames and words[k + 1][2] not in STOP_CAPS:
            return k + 1
        return k

    k = 0
    while k < n:
        s, e, w = words[k]
        if k == 0 or not adjacent[k - 1]:
            # A run that opens a sentence with a non-cue word reads like a heading ("Frank
            # Discussion Needed"): its later pairs get no mid-sentence benefit of the doubt.
            heading = w not in STOP_CAPS and _sentence_start(text, s)
        if (
            w in TITLES
            and k + 1 < n
            and text[e : words[k + 1][0]] in (". ", " ")
            and words[k + 1][2] not in FUNCTION_WORDS
        ):
            last = k + 2 if adjacent[k + 1] and words[k + 2][2] not in STOP_CAPS else k + 1
            out.append(Candidate(s, words[last][1], PERSON, False))
            k = last + 1
            continue
        if (
            s
            and text[s - 1] == " "
            and (w not in STOP_CAPS or w in given)
            and text[text.rfind(" ", 0, s - 1) + 1 : s - 1].rstrip(",").lower() in _CUE_LAST
        ):
            cue = _CUE_BEFORE.search(text, max(0, s - 16), s)
            if cue:
                last = k + 1 if adjacent[k] and words[k + 1][2] not in STOP_CAPS else k
                end = words[last][1]
                sure = (
                    cue.group("strong") is not None
                    or _VOCATIVE_END.match(text, end) is not None
                    or (w in given and w not in AMBIGUOUS_GIVEN)
                    or (last > k and words[last][2] in surnames)
                )
                out.append(Candidate(s, end, PERSON, not sure))
                k = last + 1
                continue
        if not adjacent[k]:
            k += 1
            continue
        nxt = words[k + 1][2]
        if (w in STOP_CAPS and w not in given) or nxt in STOP_CAPS or (w not in given and nxt in given):
            k += 1  # "Sorry Maria Garcia": the name starts at Maria
            continue
        start = heading or _sentence_start(text, s)
        known_last = nxt in surnames
        if w in given and w not in AMBIGUOUS_GIVEN:
            confirm = False
        elif known_last:  # "Will Smith" / "Ruby Turner" / "Oluwaseun Novak"
            confirm = start or w not in given
        else:  # "Grace Period", "Echo Dot", "Apple Watch"
            k += 1
            continue
        last = extend(k + 1)
        out.append(Candidate(s, words[last][1], PERSON, confirm))
        k = last + 1


def _english_addresses(text: str, out: list) -> None:
    if not _NUMBER_WORD.search(text) and "Box " not in text:
        return
    for m in _EN_ADDRESS.finditer(text):
        s = m.start()
        if s and (text[s - 1].isalnum() or text[s - 1] in "_.-"):
            continue
        if not _ADDRESS_NEGATIVE.search(text, max(0, s - 24), s):
            out.append(Candidate(m.start(), m.end(), ADDRESS, False))


# --- Chinese -----------------------------------------------------------------------------


def _zh_surname_at(text: str, pos: int) -> int:
    """Length of the surname starting at `pos` (2 for a compound one), else 0."""
    if text[pos : pos + 2] in ZH_COMPOUND_SURNAMES:
        return 2
    return 1 if text[pos] in ZH_SURNAMES else 0


def _zh_given(text: str, pos: int) -> int:
    """Length (1-2) of the given name starting at `pos`."""
    n = 0
    while (
        n < 2
        and pos + n < len(text)
        and is_han(text[pos + n])
        and text[pos + n] not in _ZH_STOP
        and not _ZH_TITLE.match(text, pos + n)
    ):
        n += 1
    return n


def _chinese_people(text: str, out: list) -> None:
    for m in _ZH_LEAD.finditer(text):
        pos = m.end()
        if pos >= len(text):
            continue
        sur = _zh_surname_at(text, pos)
        if sur:
            given = _zh_given(text, pos + sur)
            if given or _ZH_TITLE.match(text, pos + sur):
                out.append(Candidate(pos, pos + sur + given, PERSON, False))
    for m in _ZH_TITLE.finditer(text):
        t = m.start()
        for k in (4, 3, 2, 1):  # surname (1-2) + given (0-2) right before the title
            s = t - k
            if s < 0:
                continue
            sur = _zh_surname_at(text, s)
            if not sur or any(ch in _ZH_STOP or not is_han(ch) for ch in text[s:t]):
                continue
            if k - sur > 2 or any(text.endswith(w, 0, s + 1) for w in _ZH_BEFORE):
                continue
            out.append(Candidate(s, m.end(), PERSON, False))
            break


def _chinese_alone(text: str, out: list) -> None:
    for m in _ZH_ALONE.finditer(text):
        run = m.group()
        if run in ZH_COMMON_WORDS or run[-1] in _ZH_PLACE_END:
            continue
        sur = _zh_surname_at(text, m.start())
        given = run[sur:]
        if sur and 1 <= len(given) <= 2 and all(ch in ZH_GIVEN_CHARS for ch in given):
            out.append(Candidate(m.start(), m.end(), PERSON, False))


def _chinese_addresses(text: str, out: list) -> None:
    for m in _ZH_ROAD_NUMBER.finditer(text):
        start = m.start()
        # Walk back over the administrative units (省/市/区/县/镇) written before the road.
        head = text[max(0, start - 24) : start]
        units = re.search(rf"(?:[{_HAN}]{{1,8}}?(?:省|自治区|特别行政区|市|州|区|县|旗|镇|乡|街道))+$", head)
        if units:
            start -= len(units.group())
        lead = _ZH_ADDRESS_LEAD.match(text, start, m.start() + 6)
        if lead:
            start = lead.end()
        out.append(Candidate(start, m.end(), ADDRESS, False))


# --- the detector ------------------------------------------------------------------------

# The NER model's verdict on (text, start, end) candidates: the PERSON span it sees
# there, or None.
Confirm = Callable[[Sequence[tuple[str, int, int]]], list["tuple[int, int] | None"]]


class NameFinder:
    """PERSON and ADDRESS findings; `confirm` (the NER model) sees only the doubtful
    candidates, all of a batch of records at once, and its span replaces theirs."""

    def __init__(self, confirm: Confirm, allow: Iterable[str] = ()):
        self.given, self.surnames = census_names()
        self.confirm = confirm
        self.allow = frozenset(a.strip() for a in allow if a.strip())

    def candidates(self, text: str) -> list[Candidate]:
        out: list[Candidate] = []
        if not text.isascii():
            _chinese_people(text, out)
            _chinese_alone(text, out)
            _chinese_addresses(text, out)
        _english_addresses(text, out)
        _english_people(text, self.given, self.surnames, out)
        if self.allow:
            out = [c for c in out if not any(a in text[c.start : c.end] for a in self.allow)]
        return out

    def propose(self, texts: Sequence[str]) -> Proposal:
        """The candidate pass over one record's strings (no model call)."""
        per_text = None
        for i, text in enumerate(texts):
            cands = self.candidates(text) if text else None
            if cands:
                if per_text is None:
                    per_text = [[] for _ in texts]
                per_text[i] = cands
        if per_text is None:
            return Proposal(texts, None, ())
        return Proposal(texts, per_text, [(i, c) for i, cands in enumerate(per_text) for c in cands if c.confirm])

    def settle(self, proposals: Sequence[Proposal]) -> list[list[list[Finding]] | None]:
        """Findings per text per proposal (None: nothing in that record); every doubtful
        candidate of all the proposals goes to the model in one batch."""
        asked = [(p.texts[i], c.start, c.end) for p in proposals for i, c in p.doubtful]
        answers = iter(self.confirm(asked) if asked else ())
        out: list = []
        for p in proposals:
            if p.per_text is None:
                out.append(None)
                continue
            verdict = {key: next(answers) for key in p.doubtful}
            out.append(
                [
                    resolve_overlaps(
                        [
                            _ranked(c if not c.confirm else _clip(c, verdict[(i, c)]))
                            for c in cands
                            if not c.confirm or verdict[(i, c)] is not None
                        ]
                    )
                    for i, cands in enumerate(p.per_text)
                ]
            )
        return out

    def find(self, texts: Sequence[str]) -> list[list[Finding]]:
        return self.settle([self.propose(texts)])[0] or [[] for _ in texts]


@dataclass
class Proposal:
    texts: Sequence[str]
    per_text: list[list[Candidate]] | None  # None: no candidate in any text
    doubtful: Sequence[tuple[int, Candidate]]


def _clip(c: Candidate, entity: tuple[int, int]) -> Candidate:
    """The model's PERSON span, within the candidate's ("May Johnson" -> "Johnson", but not
    "Bill Gates" -> "Bill Gates Foundation")."""
    return Candidate(max(c.start, entity[0]), min(c.end, entity[1]), c.type, False)


def _ranked(c: Candidate) -> tuple[int, int, int, str]:
    """An address outranks a name inside it ("42 Baker Street")."""
    return (int(c.type == ADDRESS), c.start, c.end, c.type)
