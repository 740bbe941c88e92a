"""The P4_16 grammar (the engine's subset, LALR(1) for lark).

Type names are told apart from other identifiers before parsing (TYPE_IDENT, like p4c's lexer
feedback), and `>>` is two adjacent `>` tokens so that `register<bit<32>>` closes both lists.
Precedence follows p4c: comparisons bind looser than bitwise operators.
"""

GRAMMAR = r"""
start: _decl*

_decl: const_decl | typedef_decl | header_decl | struct_decl | union_decl | enum_decl
     | error_decl | match_kind_decl | extern_decl | action_decl | parser_decl | parser_type_decl
     | control_decl | control_type_decl | package_decl | instantiation | function_decl | ";"

// ---------------- annotations
annotations: annotation+
annotation: "@" any_name ("(" [ann_args] ")")?
          | "@" any_name "[" [s_ann_args] "]" -> structured_annotation   // P4_16 1.2
          | "@" any_name FREE_BODY -> free_annotation       // an annotation nobody parses
ann_args: ann_arg ("," ann_arg)*
s_ann_args: ann_arg ("," ann_arg)* ","? | ","  // p4c's optTrailingComma (not in parenthesized bodies)
ann_arg: expr | any_name "=" expr | base_type | "string" -> t_string    // @p4runtime_translation(uri, bit<32>)

// ---------------- types
?type_ref: base_type | named_type | spec_type | stack_type | "void" -> t_void | "error" -> t_error
          | "match_kind" -> t_match_kind    // a baseType in the spec's grammar: tuple<match_kind>
          | "string" -> t_string | "tuple" _lt [type_list] _gt -> t_tuple | "list" _lt type_ref _gt -> t_list
          | "." named_type | "." spec_type    // p4c's prefixedType: .T is the top level's T
base_type: "bool"                      -> t_bool
         | "bit"                       -> t_bit1
         | "bit" _lt width _gt         -> t_bit
         | "int" _lt width _gt         -> t_int
         | "int"                       -> t_infint
         | "varbit" _lt width _gt      -> t_varbit
width: "(" expr ")" | width_cond      // p4c's nonGrtExpression: bit<W>, bit<N + 1>, bit<c.f[7:0]>,
                                      // bit<b ^ 3>, bit<a < 3 ? 5 : 4> (an expression without '>')
?width_cond: width_lor | width_lor "?" expr ":" width_cond -> cond
?width_lor: width_land | width_lor "||" width_land -> lor_op
?width_land: width_eq | width_land "&&" width_eq -> land_op
?width_eq: width_rel | width_eq EQOP width_rel -> binop
?width_rel: width_bor | width_rel RELOP width_bor -> binop
          | width_rel LT width_bor -> binop
?width_bor: width_bxor | width_bor "|" width_bxor -> bor_op
?width_bxor: width_band | width_bxor "^" width_band -> bxor_op
?width_band: width_shift | width_band "&" width_shift -> band_op
?width_shift: width_sum | width_shift "<<" width_sum -> shl_op
?width_sum: width_prod | width_sum (PLUS | MINUS | ADDOP) width_prod -> binop
?width_prod: width_atom | width_prod MULOP width_atom -> binop
?width_atom: INT -> int_lit
           | nontype_name -> name_ref
           | width_atom "[" expr ":" expr "]" -> slice
           | width_atom "." member_name -> member
named_type: TYPE_IDENT
spec_type: TYPE_IDENT _lt type_list _gt
type_list: type_arg ("," type_arg)*
?type_arg: type_ref | "_" -> t_dontcare       // a type argument left to inference (p4c's typeArg)
stack_type: type_ref "[" expr "]"

type_params: _lt type_list _gt
_gt: GT | SHR_GT
_lt: LT | TLT

// ---------------- declarations
const_decl: [annotations] "const" type_ref any_name [dims] "=" expr ";"
typedef_decl: [annotations] ("typedef" | NEWTYPE) type_ref TYPE_IDENT ";"
            | [annotations] "typedef" _derived_decl TYPE_IDENT ";" -> typedef_derived
_derived_decl: header_decl | struct_decl | union_decl | enum_decl    // typedef struct S {...} T;
header_decl: [annotations] "header" TYPE_IDENT [type_params] "{" field* "}"
struct_decl: [annotations] "struct" TYPE_IDENT [type_params] "{" field* "}"
union_decl: [annotations] "header_union" TYPE_IDENT [type_params] "{" field* "}"
field: [annotations] type_ref member_name [dims] ";"
dims: ("[" expr "]")+          // T name[N]: p4c's declarator, the same as T[N] name
enum_decl: [annotations] "enum" TYPE_IDENT "{" _names "}"
         | [annotations] "enum" type_ref TYPE_IDENT "{" enum_value ("," enum_value)* ","? "}" -> ser_enum_decl
enum_value: any_name "=" expr
error_decl: "error" "{" any_name ("," any_name)* "}"     // p4c: no trailing comma here
match_kind_decl: "match_kind" "{" _names "}"
_names: any_name | any_name "," | any_name "," _names

extern_decl: [annotations] "extern" TYPE_IDENT [type_params] "{" extern_member* "}" -> extern_obj
           | [annotations] "extern" function_proto ";"                              -> extern_func
extern_member: [annotations] TYPE_IDENT "(" params ")" ";"      -> extern_ctor
             | [annotations] "abstract"? function_proto ";"    -> extern_method
function_proto: type_ref any_name [type_params] "(" params ")"
function_decl: [annotations] function_proto block

params: [param ("," param)*]
param: [annotations] [direction] type_ref any_name [dims] ("=" expr)?
!direction: "inout" | "in" | "out"

package_decl: [annotations] "package" TYPE_IDENT [type_params] "(" params ")" ";"
parser_type_decl: [annotations] "parser" TYPE_IDENT [type_params] "(" params ")" ";"
control_type_decl: [annotations] "control" TYPE_IDENT [type_params] "(" params ")" ";"

instantiation: [annotations] type_ref "(" args ")" any_name ";"

parser_decl: [annotations] "parser" TYPE_IDENT [type_params] "(" params ")" ctor_params? "{" _parser_local* parser_state+ "}"
ctor_params: "(" params ")"
_parser_local: const_decl | var_decl | instantiation | value_set_decl
value_set_decl: [annotations] "value_set" _lt type_ref _gt "(" expr ")" any_name ";"
parser_state: [annotations] "state" any_name "{" _stmt* transition? "}"
transition: "transition" any_name ";"             -> trans_direct
          | "transition" select_expr               -> trans_select
select_expr: "select" "(" expr_list ")" "{" select_case* "}"
select_case: keyset ":" any_name ";"
?keyset: keyset_elem | "(" keyset_elem ("," keyset_elem)+ ")" -> keyset_tuple
       | "(" keyset_reduced ")" -> keyset_tuple      // (m &&& k): a tuple of one, as in p4c
?keyset_reduced: expr "&&&" expr -> ks_mask
               | expr ".." expr  -> ks_range
               | "default"       -> ks_default
               | "_"             -> ks_default
?keyset_elem: expr
            | expr "&&&" expr -> ks_mask
            | expr ".." expr  -> ks_range
            | "default"       -> ks_default
            | "_"             -> ks_default

control_decl: [annotations] "control" TYPE_IDENT [type_params] "(" params ")" ctor_params? "{" _control_local* "apply" block "}"
_control_local: const_decl | var_decl | instantiation | action_decl | table_decl

action_decl: [annotations] "action" any_name "(" params ")" block

table_decl: [annotations] "table" any_name "{" table_prop* "}"
table_prop: [annotations] "key" "=" "{" key_elem* "}"                    -> tp_key
          | [annotations] "actions" "=" "{" action_ref* "}"              -> tp_actions
          | [annotations] [CONST] "entries" "=" "{" entry* "}"            -> tp_entries
          | [annotations] [CONST] table_kw_name "=" expr ";"             -> tp_value
CONST: "const"
key_elem: expr ":" any_name [annotations] ";"
action_ref: [annotations] _action_name ";"
          | [annotations] _action_name "(" args ")" ";"
_action_name: nontype_name | TYPE_IDENT | top_name     // p4c's actionRef: no `list` (as in expressions)
entry: [annotations] [CONST] [entry_priority] keyset ":" expr [annotations] ";"
entry_priority: "priority" "=" (INT | "(" expr ")") ":"

// ---------------- statements
block: [annotations] "{" _stmt* "}"
_stmt: assignment | call_stmt | if_stmt | block | exit_stmt | return_stmt | switch_stmt
     | var_decl | const_decl | empty_stmt | for_stmt | break_stmt | continue_stmt
empty_stmt: ";"
assignment: expr "=" expr ";"
          | expr OPASSIGN expr ";" -> op_assignment
call_stmt: expr ";"
if_stmt: "if" "(" expr ")" _stmt ("else" _stmt)?
exit_stmt: "exit" ";"
return_stmt: "return" expr? ";"
switch_stmt: "switch" "(" expr ")" "{" switch_case* "}"
switch_case: switch_label ":" block?
?switch_label: "default" -> sw_default | expr | TYPE_IDENT   // a constant expression, or an action name
var_decl: [annotations] type_ref member_name [dims] ("=" expr)? ";"
for_stmt: [annotations] "for" "(" for_items ";" [expr] ";" for_items ")" _stmt    // @unroll for (...)
        | [annotations] "for" "(" [annotations] type_ref member_name "in" for_collection ")" _stmt -> for_in
?for_collection: expr | expr ".." expr -> for_range
for_items: [for_item ("," for_item)*]
?for_item: [annotations] type_ref member_name "=" expr -> for_var
         | expr "=" expr -> assignment
         | expr OPASSIGN expr -> op_assignment
         | expr -> call_stmt
break_stmt: "break" ";"
continue_stmt: "continue" ";"

// ---------------- expressions (precedence as in p4c)
expr_list: [expr ("," expr)*]
list_items: [expr ("," expr)* ","?] | ","      // p4c's optTrailingComma (even `{,}`)
named_item: any_name "=" expr
args: [arg ("," arg)*]
?arg: expr | any_name "=" expr -> named_arg | "_" -> dontcare_arg
    | any_name "=" "_" -> named_dontcare_arg

?expr: ternary
?ternary: lor | lor "?" expr ":" ternary -> cond
?lor: land | lor "||" land -> lor_op
?land: equality | land "&&" equality -> land_op
?equality: relational | equality EQOP relational -> binop
?relational: bor | relational RELOP bor -> binop
           | relational LT bor -> binop
           | relational GT bor -> gt_op
?bor: bxor | bor "|" bxor -> bor_op
?bxor: band | bxor "^" band -> bxor_op
?band: shift | band "&" shift -> band_op
?shift: additive | shift "<<" additive -> shl_op
      | shift SHR_GT GT additive -> shr_op
?additive: multiplicative | additive (PLUS | MINUS | ADDOP) multiplicative -> binop
?multiplicative: unary | multiplicative MULOP unary -> binop
?unary: postfix
      | "!" unary -> not_op
      | "~" unary -> inv_op
      | MINUS unary -> neg_op
      | PLUS unary
      | "(" type_ref ")" unary -> cast
?postfix: primary
        | postfix "." member_name -> member
        | postfix "[" expr "]" -> index
        | postfix "[" expr ":" expr "]" -> slice
        | postfix "[" expr "+:" expr "]" -> plus_slice     // [lo +: width] (P4_16 1.2.5)
        | postfix "(" args ")" -> call
        | postfix TLT type_list _gt "(" args ")" -> generic_call
?primary: INT -> int_lit
        | "true" -> true_lit
        | "false" -> false_lit
        | STRING -> string_lit
        | nontype_name -> name_ref
        | top_name -> name_ref
        | "." TYPE_IDENT "." member_name -> type_member
        | "." TYPE_IDENT "(" args ")" -> ctor_call
        | "error" "." any_name -> error_member
        | TYPE_IDENT "." member_name -> type_member
        | TYPE_IDENT "(" args ")" -> ctor_call
        | spec_type "(" args ")" -> ctor_call
        | "{" list_items "}" -> list_expr
        | SLBRACE named_item ("," named_item)* ["," DOTS] ","? "}" -> struct_expr
        | DOTS -> dots             // a default initializer (P4_16 1.2.4)
        | "{" "#" "}" -> invalid   // the invalid header or header union
        | "(" expr ")"
        | "this" -> this_ref

// P4_16 lets the contextual keywords name things (p4c's nonTypeName / nonTableKwName): a
// parameter `in K key`, a variable `priority`, an action `state`; `type` stays an identifier
// for the lexer, which tells `type T N;` apart on its own.
?nontype_name: NAME | kw_name
!kw_name: "apply" | "key" | "actions" | "state" | "entries" | "priority"
?member_name: nontype_name | TYPE_IDENT | list_kw      // p4c's name: `bit<32> list;`, hdr.list
?any_name: nontype_name | TYPE_IDENT | list_kw     // p4c's name: `match_kind { list }`, `action list()`
top_name: "." nontype_name      // p4c's prefixedNonTypeName: .x is the top level's x
?table_kw_name: NAME | TYPE_IDENT | table_kw
!table_kw: "apply" | "state" | "priority"
!list_kw: "list"

EQOP: "==" | "!="
RELOP: "<=" | ">="
ADDOP: "|+|" | "|-|" | "++"
PLUS: "+"
MINUS: "-"
OPASSIGN: "+=" | "-=" | "*=" | "/=" | "%=" | "&=" | "|=" | "^=" | "<<=" | "|+|=" | "|-|="
MULOP: "*" | "/" | "%"
DOTS: "..."
LT: "<"
GT: ">"
%declare TLT TYPE_IDENT SHR_GT NEWTYPE SLBRACE FREE_BODY

INT: /(\d+[ws])?(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|0[dD][0-9_]+|[0-9][0-9_]*)/
STRING: /"(\\.|[^"\\])*"/         // may span lines (p4c's lexer)
NAME: /[A-Za-z_][A-Za-z0-9_]*/

%ignore /[ \t\f\r\n]+/
"""
