(struct_item
  name: (type_identifier) @name.definition.class) @definition.class

(enum_item
  name: (type_identifier) @name.definition.enum
  body: (enum_variant_list) @body) @definition.enum

(union_item
  name: (type_identifier) @name.definition.class) @definition.class

(type_item
  name: (type_identifier) @name.definition.type) @definition.type

(trait_item
  name: (type_identifier) @name.definition.interface
  body: (declaration_list) @body) @definition.interface

(impl_item
  type: (_) @name.definition.impl
  body: (declaration_list) @body) @definition.impl

(function_item
  name: (identifier) @name.definition.function
  body: (block) @body) @definition.function

(function_signature_item
  name: (identifier) @name.definition.function) @definition.function

(mod_item
  name: (identifier) @name.definition.module
  body: (declaration_list) @body) @definition.module

(macro_definition
  name: (identifier) @name.definition.macro) @definition.macro
