"""Seeded text: titles, sentences and paragraphs that read like small news and shop pages.

Everything here is a pure function of its key, so the same key always gives the same
text. Different keys draw different word sequences from a vocabulary of several hundred
words, so the SimHash of two generated pages differs in many bits.
"""

from __future__ import annotations

import hashlib
import random


def _words(block: str) -> tuple[str, ...]:
    return tuple(block.split())

_NOUNS = _words("""
account action address advice afternoon agency agreement airport album answer apartment
apple area army article artist audience author autumn balance bank barrel basket battery
beach bicycle bird blanket board boat body bottle boundary branch bread bridge brother
budget building bus business cabinet cable camera campaign candle capital captain card
career carpet castle cat ceiling century chair champion channel chapter charity chicken
child church circle citizen city climate clock cloud coach coast coffee collection college
colour committee community company computer concert conference contract corner cottage
council country county course court cousin crowd culture customer cycle dance daughter
debate decade decision degree desert design desk detail device diary dinner director
district doctor document dog door drawing dream driver economy editor election engine
engineer evening event exhibition factory family farm farmer father feature festival
field film finance fire fish flag flight floor flower forest fortune fountain friend
garden gate generation gift glass government grain grandmother group guest guide guitar
habit harbour harvest health heart highway history holiday horse hospital hotel house
idea island journal journey judge kitchen knowledge ladder lake landscape language lawyer
leader lesson letter library license light machine magazine manager map market meadow
meeting member memory message method minister mirror model moment morning mountain museum
music nation neighbour network newspaper night notebook novel ocean office officer orchard
orchestra owner painter palace paper parent park partner passenger path pattern people
pepper photograph piano picture pilot planet plant player pocket poem police pond
population port portrait potato power president prison problem professor programme project
property proposal province pupil puzzle quarter question radio railway rain reader recipe
record region report republic research resident restaurant result river road rock roof
room route rule safety sailor salad sample school science scientist season secretary
sector service shadow shelf ship shop shore signal silver singer sister skill sky society
soldier song speaker station statue stone storm story street student studio summer
supper surface system table teacher team teapot telephone temple tennis theatre theory
ticket timber tower town tractor trade tradition train traveller treasure tree trial
tunnel umbrella uncle union university valley vegetable village violin visitor voice
volunteer wagon wall weather wedding week wheel window winter witness worker workshop
writer yard year
""")

_ADJECTIVES = _words("""
able active ancient angry annual anxious autumn bold brave bright brief broad busy calm
careful central cheap chief civil clean clever close cold common complex cool costly
crisp curious daily dark dear deep direct distant dry eager early eastern easy elder
empty entire equal exact fair famous fast final fine firm flat formal fresh friendly
full gentle giant glad golden good grand great green grey happy hard heavy helpful hidden
high honest huge humble idle important inner keen kind large late lazy light little
local lonely long loud lovely loyal lucky main major mild minor modern narrow national
natural nearby neat new noble normal northern odd official old open orange ordinary
outer pale patient plain pleasant polite poor popular private proud public pure quick
quiet rapid rare ready real recent regular remote rich right rough round royal rural
safe secret serious sharp short silent simple slow small smart smooth soft solid
southern special steady steep still strange strict strong sudden sunny sweet tall
tender thick thin tidy tiny total tough tropical true urban useful usual vast violet
warm weekly western wet whole wide wild wise wooden young
""")

_VERBS = _words("""
accepts admires announces answers approves arranges arrives attends avoids borrows builds
buys calls carries catches celebrates changes chooses cleans closes collects compares
completes considers counts covers creates crosses delivers describes designs discovers
discusses draws drives earns enjoys enters examines expects explains explores fills finds
finishes follows gathers guides handles helps hides holds improves includes inspects
invites joins keeps leads learns leaves lends lifts likes lists loads makes manages marks
measures meets misses moves notices observes offers opens orders organises paints passes
plans plants plays pleases prepares presents produces protects publishes pulls pushes
reaches reads receives recommends records reduces remembers repairs replaces reports
rescues reveals sells sends serves shares shows signs studies supports surprises teaches
tests thanks tracks trades trains translates treats visits watches welcomes wins writes
""")

_PREPOSITIONS = _words("""
above across after against along among around before behind beside between beyond
during inside near outside through toward under until within without
""")

_ADVERBS = _words("""
again almost already always calmly carefully clearly closely early easily eventually
finally firmly gently gladly happily honestly nearly often openly partly politely
quickly quietly rarely really recently regularly seldom simply slowly soon suddenly
today together usually warmly weekly yesterday
""")

_CONNECTORS = _words("""
and but because although while since whereas so yet
""")


_DETERMINERS = ("the", "a", "one", "every", "this", "that", "our", "their", "each", "some",
                "another", "no")
_SYLLABLES = ("ka", "lo", "mi", "ra", "ten", "vor", "sil", "an", "bel", "dun", "fa", "gri",
              "hol", "is", "jo", "kel", "mar", "nor", "pel", "qui", "ros", "sul", "tam", "ub",
              "vel", "wim", "yar", "zen")


def rng_for(*parts: object) -> random.Random:
    """A random generator seeded by a stable hash of ``parts`` (the same in every process)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def stable_int(*parts: object) -> int:
    """A stable 64-bit integer hash of ``parts``."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def _pick(rng: random.Random, seq: tuple[str, ...] | list[str]) -> str:
    """rng.choice, about three times faster (one float per pick)."""
    return seq[int(rng.random() * len(seq))]


def _plural(noun: str) -> str:
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "o", "u"):
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def _plural_verb(verb: str) -> str:
    """'accepts' -> 'accept', 'carries' -> 'carry', 'catches' -> 'catch'."""
    if verb.endswith("ies"):
        return verb[:-3] + "y"
    if verb.endswith(("ches", "shes", "sses", "xes")):
        return verb[:-2]
    return verb[:-1]


def name(rng: random.Random) -> str:
    """A made-up proper name such as 'Tenyar' or 'Sildunwim'."""
    return "".join(_pick(rng, _SYLLABLES) for _ in range(2 + int(rng.random() * 2))).capitalize()


def _clause(rng: random.Random, names: list[str]) -> list[str]:
    r = rng.random()
    plural = False
    if r < 0.2:
        words = [_pick(rng, names)]
    elif r < 0.45:
        words = [_pick(rng, _ADJECTIVES), _plural(_pick(rng, _NOUNS))]
        plural = True
    else:
        words = [_pick(rng, _DETERMINERS), _pick(rng, _ADJECTIVES), _pick(rng, _NOUNS)]
    if rng.random() < 0.4:
        words.append(_pick(rng, _ADVERBS))
    verb = _pick(rng, _VERBS)
    words.append(_plural_verb(verb) if plural else verb)
    r = rng.random()
    if r < 0.3:
        words += [str(2 + int(rng.random() * 1999)), _plural(_pick(rng, _NOUNS))]
    elif r < 0.5:
        words.append(_pick(rng, names))
    else:
        words += [_pick(rng, _DETERMINERS), _pick(rng, _NOUNS)]
    if rng.random() < 0.6:
        words += [_pick(rng, _PREPOSITIONS), _pick(rng, _DETERMINERS),
                  _pick(rng, _ADJECTIVES), _pick(rng, _NOUNS)]
    return words


def sentence(rng: random.Random, names: list[str]) -> str:
    """One sentence of one or two clauses, capitalised and ending with a full stop."""
    words = _clause(rng, names)
    if rng.random() < 0.4:
        words += [_pick(rng, _CONNECTORS), *_clause(rng, names)]
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def paragraphs(rng: random.Random, words: int) -> list[str]:
    """Paragraphs of 3 to 6 sentences adding up to at least ``words`` words.

    Each call invents a few names of its own, so two pages share little beyond the
    grammar, and their SimHash fingerprints lie far apart.
    """
    names = [name(rng) for _ in range(5)]
    out: list[str] = []
    count = 0
    while count < words:
        sentences = [sentence(rng, names) for _ in range(3 + int(rng.random() * 4))]
        count += sum(len(s.split()) for s in sentences)
        out.append(" ".join(sentences))
    return out


def title(rng: random.Random) -> str:
    """A short headline such as 'Quiet harbour welcomes the brave captain'."""
    words = [_pick(rng, _ADJECTIVES), _pick(rng, _NOUNS), _pick(rng, _VERBS),
             "the", _pick(rng, _ADJECTIVES), _pick(rng, _NOUNS)]
    text = " ".join(words)
    return text[0].upper() + text[1:]


def vocabulary_size() -> int:
    """Number of distinct words the generator draws from."""
    return len(set(_NOUNS) | set(_ADJECTIVES) | set(_VERBS) | set(_PREPOSITIONS)
               | set(_ADVERBS) | set(_CONNECTORS) | set(_DETERMINERS))
